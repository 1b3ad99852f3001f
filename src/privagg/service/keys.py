"""Private keys at rest: the HPKE private keys of the analyzer and of TSS's S2, sealed under a key-encryption key.

Their databases hold every task's private key; whoever copies one (a backup, a replica, a stolen disk) could
open every message of every task. So a key is stored sealed with AES-256-GCM
(``cryptography``) under a KEK that lives outside the database, given to the analyzer by the environment
(``PRIVAGG_KEK``: 32 random bytes, base64) or a file (``kek_file``: made by ``privagg keys kek``, mode 0600):

    sealed key = version (1 byte, 1) || KEK id (8 bytes) || nonce (12 bytes) || AES-256-GCM(KEK, nonce,
                 private key, associated data = "privagg sealed key v1" || task id)

The KEK id is the first 8 bytes of SHA-256("privagg kek id" || KEK): it names which KEK sealed a key without
revealing it, so a server given another KEK refuses to start (:meth:`KeyEncryptionKey.check_stored`), naming
both ids, before it decrypts
anything. The task id as associated data binds each sealed key to its task: a key copied onto another task's
row does not open. A fresh 96-bit random nonce per seal (one seal per task) stays far below GCM's 2^32 limit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import stat
from pathlib import Path

from ..errors import ParameterError

KEK_BYTES, NONCE_BYTES, ID_BYTES, VERSION = 32, 12, 8, 1
ENV = "PRIVAGG_KEK"
WHERE = (f"{ENV} (32 bytes, base64) or kek_file (--kek-file, PRIVAGG_<ROLE>_KEK_FILE or the config file's kek_file; "
         "make one with `privagg keys kek --output FILE`)")


class KeyEncryptionKey:
    """A KEK (:mod:`privagg.service.keys`): seals and opens the private keys a database stores."""

    def __init__(self, key: bytes, source: str) -> None:
        if not isinstance(key, bytes) or len(key) != KEK_BYTES:
            raise ParameterError(source, f"a key-encryption key of {KEK_BYTES} bytes",
                                 f"{len(key)} bytes" if isinstance(key, bytes) else type(key).__name__)
        self._key, self.source = key, source
        self.kek_id = hashlib.sha256(b"privagg kek id" + key).digest()[:ID_BYTES].hex()

    @classmethod
    def generate(cls) -> "KeyEncryptionKey":
        """A new random KEK (tests, demos; a deployment keeps its KEK in a file or a secret store)."""
        return cls(secrets.token_bytes(KEK_BYTES), "a generated key")

    @classmethod
    def local(cls) -> "KeyEncryptionKey":
        """The caller's KEK (``PRIVAGG_KEK``) if set, else a new one: for services a demo, test or benchmark starts
        on loopback (they take it as ``PRIVAGG_KEK``, :meth:`export`)."""
        return cls.load() if os.environ.get(ENV) else cls.generate()

    @classmethod
    def load(cls, kek_file: str | os.PathLike | None = None) -> "KeyEncryptionKey":
        """The KEK in ``kek_file`` if given, else in the environment (``PRIVAGG_KEK``); a ParameterError naming
        where it was looked for if there is none or it is not a KEK, or if its file is open to other users."""
        if kek_file is not None:
            path = Path(kek_file)
            try:
                mode, text = path.stat().st_mode, path.read_text().strip()
            except (OSError, UnicodeDecodeError) as err:  # (a name of the error's class said nothing to an operator)
                why = err.strerror if isinstance(err, OSError) else "not UTF-8 text, as privagg keys kek writes it"
                raise ParameterError("kek_file", "a readable file holding a key-encryption key (base64)",
                                     f"{path} ({why})") from None
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ParameterError("kek_file", "a file only its owner may read or write (chmod 600)",
                                     f"{path}, mode {stat.S_IMODE(mode):o}")
            return cls(_decoded(text, "kek_file"), "kek_file")
        text = os.environ.get(ENV)
        if not text:
            raise ParameterError("key-encryption key", f"one given: {WHERE}", "none")
        return cls(_decoded(text.strip(), ENV), ENV)

    def export(self) -> str:
        """This KEK in base64, as ``PRIVAGG_KEK`` and a KEK file hold it."""
        return base64.b64encode(self._key).decode()

    def write(self, path: str | os.PathLike) -> None:
        """Save this KEK to a new file created mode 0600 (an existing file is not overwritten)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as err:
            raise ParameterError("output", "a new file in a writable folder", f"{path} ({err.strerror})") from None
        with os.fdopen(fd, "w") as out:
            out.write(self.export() + "\n")

    def seal(self, private_key: bytes, task_id: str) -> bytes:
        """``private_key`` sealed for ``task_id``'s row."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = secrets.token_bytes(NONCE_BYTES)
        return (bytes([VERSION]) + bytes.fromhex(self.kek_id) + nonce
                + AESGCM(self._key).encrypt(nonce, private_key, _associated(task_id)))

    def open(self, sealed: bytes, task_id: str) -> bytes:
        """The private key sealed for ``task_id``; a ParameterError if another KEK sealed it, or it was altered
        or moved from another task's row (nothing is decrypted with a wrong key)."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.check(sealed)
        body = sealed[1 + ID_BYTES:]
        try:
            return AESGCM(self._key).decrypt(body[:NONCE_BYTES], body[NONCE_BYTES:], _associated(task_id))
        except InvalidTag:
            raise ParameterError("sealed key", f"the key sealed for task {task_id} by this KEK", "a key altered "
                                 "or moved from another task's row") from None

    def check(self, sealed: bytes) -> None:
        """A ParameterError naming the KEK unless this KEK sealed ``sealed`` (its version and KEK id)."""
        if len(sealed) < 1 + ID_BYTES + NONCE_BYTES or sealed[0] != VERSION:
            raise ParameterError("sealed key", f"version {VERSION} of privagg's sealed keys", f"{len(sealed)} bytes")
        found = sealed[1:1 + ID_BYTES].hex()
        if found != self.kek_id:
            raise ParameterError(self.source, f"the key-encryption key this database's keys were sealed with (KEK id "
                                 f"{found})", f"KEK id {self.kek_id}")


    def check_stored(self, engine, table) -> None:
        """A ParameterError naming the KEK unless this KEK sealed every key ``table`` (its ``sealed_key`` and
        ``kek_id`` columns) holds: the check a server makes as it starts."""
        import sqlalchemy as sa

        with engine.connect() as c:
            sealed = c.execute(sa.select(table.c.sealed_key).where(table.c.kek_id != self.kek_id).limit(1)).scalar()
        if sealed is not None:
            self.check(sealed)


def seal_raw_keys(table: str, kek: KeyEncryptionKey | None, revision: str) -> None:
    """The Alembic step that moves an older database (analyzer a0003, S2 s2_0002): each raw ``private_key`` of
    ``table`` sealed into ``sealed_key`` under ``kek`` with its ``kek_id``, then the raw column dropped. With keys
    to seal and no KEK it stops, naming it, before it changes anything."""
    import sqlalchemy as sa
    from alembic import op

    connection = op.get_bind()
    old = sa.table(table, sa.column("task_id", sa.String), sa.column("private_key", sa.LargeBinary))
    rows = connection.execute(sa.select(old)).all()
    if rows and kek is None:
        raise ParameterError("key-encryption key", f"one given to seal the {len(rows)} private keys this database "
                             f"kept raw (migration {revision}): {WHERE}", "none")
    with op.batch_alter_table(table) as batch:
        batch.add_column(sa.Column("sealed_key", sa.LargeBinary))
        batch.add_column(sa.Column("kek_id", sa.String(16)))
    new = sa.table(table, sa.column("task_id", sa.String), sa.column("sealed_key", sa.LargeBinary),
                   sa.column("kek_id", sa.String))
    for row in rows:
        connection.execute(sa.update(new).where(new.c.task_id == row.task_id).values(
            sealed_key=kek.seal(row.private_key, row.task_id), kek_id=kek.kek_id))
    with op.batch_alter_table(table) as batch:
        batch.alter_column("sealed_key", nullable=False)
        batch.alter_column("kek_id", nullable=False)
        batch.drop_column("private_key")


def _associated(task_id: str) -> bytes:
    return b"privagg sealed key v1" + task_id.encode()


def _decoded(text: str, source: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ParameterError(source, f"a key-encryption key: {KEK_BYTES} bytes in base64", "text that is not "
                             "base64") from None
