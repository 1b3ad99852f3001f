"""Math and primitives, no I/O and no protocol knowledge (DESIGN.md, "Layers")."""
