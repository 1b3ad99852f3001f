"""Privacy calibration and accounting: closed forms from the papers, exact numeric calibrators, descriptions."""
