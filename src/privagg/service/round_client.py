"""The SDK of a user of a multi-round protocol run by the round driver (:mod:`privagg.service.rounds`): his rounds
against the server (numpy, randomgen, ``cryptography``; stdlib HTTP). DPDS and DPDG:

    from privagg.service.sharing.client import SharingClient
    user = SharingClient.fetch(server_url, task_id, organisation_key=pinned)  # the task as its organisation signed it
    user.enroll(token)                                 # his own X25519 and identity keys; his index in the roster
    user.send("advertise", value)                      # round 1, once the organisation signed the roster
    user.send("check")                                 # round 2: his backups checked, complaints and pair key
    user.send("masked_sum")                            # round 3, once round 2 closed
    user.send("consistency")                           # round 4: his signature of the survivor lists
    user.send("reveal")                                # round 5, once t signatures of them came back

The protocol is the role its registry entry declares (:class:`privagg.protocols.sharing_parties.SharingUser`),
with secure randomness; this module only fetches each round's inbox, seals, opens, signs, checks and sends. Each
relayed message (a backup) is sealed with HPKE to its recipient's public key from the roster, with the round's
relay, the task, sender and recipient bound as HPKE's info, so the server relays what it cannot read. A request
the server did not answer is sent again (the same bytes); "already sent" then means the first arrived.

No key comes from the server alone (docs/privacy.md, "Dishonest parties"): the device pins its organisation's Ed25519 key
and checks the task's signature (the servers' keys in it: TSS's S2) and the roster's: the organisation signs the
Merkle root of every user's identity and X25519 keys, and the device fetches the entries of the users the server
names to him (his neighbours, recipients, senders, signers) with their inclusion proofs (``GET
/tasks/{id}/roster/entries``), each checked against the signed root, O(k log n) bytes on a graph of degree k; on
the complete graph the whole list, its root recomputed (docs/privacy.md, "The roster a device downloads"). Each
key the server names (a recipient's) must be the proven entry's, each message relayed to him
must carry its sender's signature (of its bytes, for this task, round and recipient), and each earlier message an
inbox carries (DPDS's pair keys) too: anything else is refused (ParameterError naming the field). Each message he
posts he signs with his identity key. A relayed message that is duly signed but does not open is his role's to
blame: it gets None for that sender (his role names the sender from the signed ciphertext).
"""

from __future__ import annotations

import base64
import inspect
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from ..core import identity
from ..errors import ParameterError
from ..protocols.registry import get
from ..protocols.roles import messages_in
from . import round_wire
from .calls import RETRY_STATUSES, SubmitError
from .device_budget import charge_device
from .round_tasks import KEM, RosterHead, SignedRoster, check_task, message_context, relay_info
from .tasks import _private_key, _public_key, _suite

_ROSTERS: dict[tuple[str, str, bytes], SignedRoster] = {}  # (server, task, organisation key) -> the whole roster
# users asked for in one GET .../roster/entries: 8 bytes an index at most, 32 KiB of the request line (web.py's
# MAX_HEADER_BYTES, 64 KiB, refuses longer ones); a TSS reporter asks for his items' helpers, alpha n of them
ENTRIES_PER_REQUEST = 4096


def _pinned(organisation_key) -> bytes:
    """The organisation's Ed25519 public key as a device pins it: 32 raw bytes (``organisation keygen`` prints it
    in base64: base64.b64decode the text), or a ParameterError naming ``organisation_key``."""
    if not isinstance(organisation_key, bytes) or len(organisation_key) != identity.KEY_BYTES:
        got = (f"{len(organisation_key)} bytes" if isinstance(organisation_key, bytes) else
               type(organisation_key).__name__)
        raise ParameterError("organisation_key", f"the organisation's Ed25519 public key, {identity.KEY_BYTES} raw "
                             "bytes (base64.b64decode the text organisation keygen printed)", got)
    return organisation_key


@dataclass
class ProvenRoster:
    """What a device holds of the roster its organisation signed: the signed head (checked under the pinned key)
    and the entries proven against its root so far: ``users`` (index -> (identity key, X25519 key)) and
    ``absent`` (indices the organisation left out)."""

    head: RosterHead
    users: dict[int, tuple[bytes, bytes]]
    absent: set[int]

    @property
    def graph_seed(self) -> bytes:
        return self.head.graph_seed

    def known(self, user) -> bool:
        return user in self.users or user in self.absent


class RosterClient:
    """What a user's device does in any multi-round task (DPDS, DPDG; TSS against S1): his own X25519 key pair, his
    enrollment in the roster, authenticated calls, seals and opens. ``sent`` and ``received`` count the bytes of
    his request and answer bodies, ``sealed_sent`` those of the sealed messages among them, ``roster_received`` those
of the roster's head and entries he downloaded (apart), and
    ``traffic`` the protocol's plaintext messages: (direction, kind) to [messages, entries].
    A subclass names its task type (``task_type``), how to read a message's kind and entries (``entries``) and
    builds the protocol's role for his index (``make_role``).

    ``organisation_key``: the organisation's Ed25519 public key (32 bytes), pinned on the device; ``task``: the
    task as its organisation signed it (:meth:`fetch` checks that signature)."""

    task_type: type

    def __init__(self, url: str, task, *, organisation_key: bytes, timeout: float = 60.0, attempts: int = 5) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.url, self.task, self.timeout, self.attempts = url.rstrip("/"), task, timeout, attempts
        self.organisation_key = _pinned(organisation_key)
        key = X25519PrivateKey.generate()
        self.private_key, self.public_key = key.private_bytes_raw(), key.public_key().public_bytes_raw()
        self._opener = None  # the private key's object, once he opens a message
        self.identity = identity.generate()
        self.identity_key = identity.public_key(self.identity)
        self.signed_roster: ProvenRoster | None = None
        # (round, sender) -> (what he signed: the sealed bytes and the round's ``binds``, his signature) of each duly
        # signed message relayed to him that did not open: what a complaint blaming its sender shows
        self.unopened: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.user: int | None = None
        self.secret: str | None = None
        self.role = None
        self.sent = self.received = self.sealed_sent = self.roster_received = 0
        self.traffic: dict[tuple[str, str], list[int]] = {}

    def __getstate__(self) -> dict:
        """His state without the loaded private key's object (:meth:`_open` loads it again), which does not pickle:
        a demo's worker process gives the clients back so (service/round_demo.py)."""
        return {**self.__dict__, "_opener": None}

    @classmethod
    def fetch(cls, url: str, task_id: str, *, organisation_key: bytes, **options):
        """The client of the task served at ``url``: its document signed by the organisation whose key the device
        pins (ParameterError ``task.signature`` otherwise), its parameters checked, never recalibrated."""
        _pinned(organisation_key)  # before the task's signature is checked with it (a reviewer's finding: a key in
        # base64 text was reported as a task signature that does not verify)
        data = json.loads(_request(f"{url.rstrip('/')}/tasks/{task_id}", None, options.get("timeout", 60.0), 5))
        data = data if isinstance(data, dict) else {}
        check_task(data.get("task"), data.get("signature"), organisation_key, task_id)
        return cls(url, cls.task_type.from_dict(data["task"]), organisation_key=organisation_key, **options)

    def make_role(self, user: int):
        raise NotImplementedError

    whole_roster = False  # whether his role needs every user's keys (the complete graph: the whole list, O(n))

    def roster(self) -> ProvenRoster:
        """What he holds of the roster the organisation signed: its head's signature checked under the pinned key,
        and his own entry, proven, as he enrolled it (ParameterError ``roster`` otherwise: the server swapped his
        keys, or the organisation left him out). With ``whole_roster``, every entry: the whole list (fetched once a
        process: the devices one process runs share it), its root recomputed; else his own, with its inclusion
        proof (:meth:`prove` adds the others he needs)."""
        if self.signed_roster is None:
            if self.whole_roster:
                key = (self.url, self.task.task_id, self.organisation_key)
                signed = _ROSTERS.get(key)
                if signed is None:
                    answer = _request(f"{self.url}/tasks/{self.task.task_id}/roster", None, self.timeout,
                                      self.attempts)
                    self.roster_received += len(answer)
                    signed = _ROSTERS[key] = SignedRoster.from_dict(json.loads(answer), self.task.task_id).verify(
                        self.organisation_key)
                proven = ProvenRoster(signed.head, signed.users, set(range(signed.size)) - set(signed.users))
            else:
                head, entries = self._entries([self.user])
                proven = ProvenRoster(head.verify(self.organisation_key), {}, set())
                self._add(proven, entries)
            n = self.task.parameters.n_users  # the graph, the proofs and the left-out users are all of n entries
            if proven.head.size != n:
                raise ParameterError("roster.size", f"the task's n = {n} (every index enrolled)", proven.head.size)
            if proven.users.get(self.user) != (self.identity_key, self.public_key):
                raise ParameterError("roster", f"a signed roster listing user {self.user} with the keys he enrolled",
                                     "one without them: his enrollment did not reach the organisation as he made it")
            self.signed_roster = proven
        return self.signed_roster

    def prove(self, users) -> ProvenRoster:
        """The roster with the entries of ``users`` (the roster's indices among them; anything else is left for the
        checks that follow to refuse) proven: those he does not hold yet fetched in one request (of at most
        ENTRIES_PER_REQUEST), each with its inclusion proof under the signed root (ParameterError naming the field otherwise: :meth:`RosterHead.proven`);
        k entries and k ceil(log2 n) hashes on a graph of degree k (docs/privacy.md, "The roster a device
        downloads")."""
        proven = self.roster()
        missing = sorted({u for u in users if type(u) is int and 0 <= u < proven.head.size and not proven.known(u)})
        for start in range(0, len(missing), ENTRIES_PER_REQUEST):  # each request line well inside the server's limit
            head, entries = self._entries(missing[start:start + ENTRIES_PER_REQUEST])
            if (head.document, head.signature) != (proven.head.document, proven.head.signature):
                raise ParameterError("roster", "the signed head he holds (the same root)", "another head: the "
                                     "server showed him another roster")
            self._add(proven, entries)
        return proven

    def _entries(self, users: list[int]) -> tuple[RosterHead, dict]:
        """The signed head the server serves with the entries of ``users``, and those entries, each proven under
        the head's root (the head's signature not checked here)."""
        answer = _request(f"{self.url}/tasks/{self.task.task_id}/roster/entries?users={','.join(map(str, users))}",
                          None, self.timeout, self.attempts)
        self.roster_received += len(answer)
        data = round_wire.decode(answer, "the roster's entries")
        head = RosterHead.parse(data.get("roster"), _bytes(data.get("signature")), self.task.task_id)
        return head, head.proven(data.get("entries"), set(users))

    @staticmethod
    def _add(proven: ProvenRoster, entries: dict) -> None:
        for user, keys in entries.items():
            if keys is None:
                proven.absent.add(user)
            else:
                proven.users[user] = keys

    def _call(self, route: str, body: dict | None = None, ok_conflicts: tuple[str, ...] = (),
              binary: bool = False) -> dict:
        """The server's answer to ``body`` at ``route`` ({} for a refusal in ``ok_conflicts``); ``binary``: the
        body and the answer in the round routes' binary form (:mod:`~privagg.service.round_wire`), else JSON."""
        encoded = None if body is None else round_wire.encode(body) if binary else json.dumps(body).encode()
        self.sent += len(encoded or b"")
        answer = _request(f"{self.url}/tasks/{self.task.task_id}/{route}", encoded, self.timeout, self.attempts,
                          ok_conflicts, round_wire.MEDIA_TYPE if binary else "application/json")
        if answer is None:
            return {}
        self.received += len(answer)
        if binary and answer[:len(round_wire.MAGIC)] == round_wire.MAGIC:
            return round_wire.decode(answer, "the server's answer")
        try:
            decoded = json.loads(answer)
        except ValueError:  # a proxy's page, or a broken server's
            decoded = None
        _shaped(f"the answer of {route}", decoded, dict, "a JSON object")
        return decoded

    def state(self) -> str:
        """The task's state at the server."""
        return json.loads(_request(f"{self.url}/tasks/{self.task.task_id}", None, self.timeout, self.attempts))["state"]

    def result(self, wait: float = 3600.0, every: float = 1.0) -> dict:
        """The task's outcome once released; while the server computes it (state ``releasing``: 409
        ``not_released``), asked again every ``every`` seconds for up to ``wait`` seconds; SubmitError otherwise."""
        end, last = time.monotonic() + wait, False
        while True:
            try:
                return self._call("result")
            except SubmitError as err:
                if err.status != 409 or time.monotonic() > end or last:
                    raise
                if self.state() == "releasing":
                    time.sleep(every)
                else:  # released (or failed) since, or not releasing at all: asked once more
                    last = True

    budget = None  # the device's LocalBudget (service/device_budget.py), charged the task's guarantee before enrolling

    def enroll(self, token: str) -> int:
        """Enroll with the organisation's one-use ``token``: its authentication half to the server, with his keys
        and their binding under its binding half (which only the organisation can check); the device's budget
        (``budget``) is charged the task's guarantee first."""
        charge_device(self.budget, self.task)
        authentication, half = identity.token_halves(token)
        b64 = base64.b64encode
        answer = self._call("enroll", {"token": authentication, "public_key": b64(self.public_key).decode(),
                                       "identity_key": b64(self.identity_key).decode(), "binding": b64(
                                           identity.binding(half, self.task.task_id, self.identity_key,
                                                            self.public_key)).decode()})
        self.user, self.secret = answer["user"], answer["secret"]
        self.role = self.make_role(self.user)
        return self.user

    def _auth(self) -> dict:
        if self.role is None:
            raise RuntimeError("enroll first")
        return {"user": self.user, "secret": self.secret}

    def count(self, direction: str, kind: str, entries: int) -> None:
        """One message of ``kind`` with ``entries`` entries sent or received (``direction``)."""
        tally = self.traffic.setdefault((direction, kind), [0, 0])
        tally[0] += 1
        tally[1] += entries

    def _plain(self, message: bytes) -> bytes:
        """A message he sends unsealed, counted."""
        self.count("sent", *self.entries(message))
        return message

    def _seal(self, message: bytes, public_key: bytes, info: bytes) -> bytes:
        sealed = _suite(KEM).encrypt(self._plain(message), _public_key(KEM, public_key), info=info)
        self.sealed_sent += len(sealed)
        return sealed

    def _open(self, sealed: bytes, info: bytes) -> bytes | None:
        """The message ``sealed`` holds, or None if it does not open (its signed sender's to answer for)."""
        try:
            if self._opener is None:  # his key loaded once for the k messages relayed to him
                self._opener = _private_key(KEM, self.private_key)
            message = _suite(KEM).decrypt(sealed, self._opener, info=info)
        except Exception:  # InvalidTag, a malformed encapsulation
            return None
        self.count("received", *self.entries(message))
        return message

    def _sign(self, number: int, recipient: int | None, message: bytes) -> bytes:
        return identity.sign(self.identity, message_context(self.task.task_id, number, self.user, recipient), message)

    def _check_signed(self, sender, signature, message: bytes, number: int, recipient: int | None, field: str) -> None:
        """That ``message`` is ``sender``'s, signed (``signature``) for this task, round ``number`` and
        ``recipient`` under his identity key in the signed roster: ParameterError naming ``field`` otherwise."""
        users = self.roster().users
        if sender not in users:
            raise ParameterError(field, "a message from a user of the signed roster", f"one from {sender!r}")
        identity.check(users[sender][0], _bytes(signature), message_context(self.task.task_id, number, sender, recipient), message,
                       field, f"user {sender} (his identity key in the signed roster)")


def _shaped(field: str, value, kind, what: str) -> None:
    """A field of the server's answer of the shape the SDK reads, else a ParameterError naming it: a dishonest or
    broken server's answer is refused, not a crash deep in the round."""
    if not isinstance(value, kind):
        raise ParameterError(field, what, type(value).__name__)


class RoundClient(RosterClient):
    """A user's device in a task the round driver runs (:class:`RosterClient`): each round answered by his role's
    method of the round (its registry entry's ``rounds``) over the inbox the server gives him."""

    @property
    def protocol(self):
        return get(self.task.parameters.protocol).rounds

    def entries(self, raw: bytes) -> tuple[str, int]:
        return self.protocol.entries(raw)

    def make_role(self, user: int):
        return self.protocol.user(self.task.parameters, user, self.task.min_survivors, identity=self.identity)

    def send(self, name: str, value: int | None = None) -> bool:
        """Round ``name`` (``value``: his value, in the round that takes it): its inbox fetched, the messages
        relayed to him opened, his role's answer sealed where it goes and posted (True); False if the round does
        not ask him (TSS's helpers' and recovery rounds ask some users) or is not open (not yet, or closed without
        him: a round closes as soon as the last user it asks has answered)."""
        protocol = self.protocol
        round_, number = protocol.round(name), protocol.number(name)
        answer = self._call("inbox", {**self._auth(), "round": number}, ("not_expected", "round_closed"), True)
        if not answer:  # 409 not_expected or round_closed: nothing for him to send
            return False
        self.roster()  # his enrollment as he made it, signed by the organisation, before he sends anything
        fields, signed = answer.get("inbox"), answer.get("signatures", {})
        _shaped("inbox", fields, dict, "an object of the coordinator's fields")
        _shaped("signatures", signed, dict, "an object of the signatures of each signed field")
        for field, _ in round_.signed:
            _shaped(f"inbox.{field}", fields.get(field), dict, "an object sender -> message")
            _shaped(f"signatures.{field}", signed.get(field, []), list, "a list of {sender, signature} objects")
            for entry in signed.get(field, []):
                _shaped(f"signatures.{field}[]", entry, dict, "a {sender, signature} object")
                _shaped(f"signatures.{field}[].sender", entry.get("sender"), int, "a user's index")
        if "identities" in fields:
            _shaped("inbox.identities", fields["identities"], (list, dict), "a list of users")
            for u in fields["identities"]:
                _shaped("inbox.identities[]", u, int, "a user's index")
        served = answer.get(round_.delivers) if round_.delivers else None
        for field, entries, key in ((round_.delivers, served, "sender"), ("public_keys", answer.get("public_keys"),
                                                                          "user")):
            for e in entries if isinstance(entries, list) else ():  # (the lists' own shape is checked below)
                _shaped(f"{field}[].{key}", e.get(key) if isinstance(e, dict) else None, int, "a user's index")
        self.prove([u for field, _ in round_.signed for u in fields.get(field, ())] + list(fields.get(
            "identities", ())) + [e.get("sender") for e in (served if isinstance(served, list) else ())
                                  if isinstance(e, dict)] +
            [e.get("user") for e in (answer.get("public_keys") or ()) if isinstance(e, dict)])
        for field, earlier in round_.signed:  # earlier messages to the server, each his sender's, signed
            signatures = {e.get("sender"): e.get("signature") for e in signed.get(field, [])}
            for sender, message in fields[field].items():
                _shaped(f"inbox.{field}[{sender}]", message, bytes, "a message (bytes)")
                self._check_signed(sender, signatures.get(sender), message, protocol.number(earlier), None,
                                   f"inbox.{field}[{sender}]")
        if "identities" in fields:  # users' identity keys (DPDS's signers): the signed roster's, never the server's
            users = self.roster().users
            fields["identities"] = {u: users[u][0] for u in fields["identities"] if u in users}
        # the neighbour graph's public randomness: the signed roster's, never the server's (a server naming another
        # seed to one user could make all his neighbours colluders)
        seed = {"graph_seed": self.roster().graph_seed} if fields.pop("graph_seed", None) is not None else {}
        for raw in messages_in(fields):
            self.count("received", *self.entries(raw))
        fields.update(seed)
        if round_.delivers:
            fields[round_.delivers] = self._delivered(round_, answer.get(round_.delivers), fields)
        keys = self._keys(answer.get("public_keys")) if round_.relay else {}
        if round_.value:
            fields["value"] = value
        method = getattr(self.role, name)
        taken = inspect.signature(method)
        try:  # the fields the role's method takes, each once: a server's answer with others is refused, not a crash
            taken.bind(**fields)
        except TypeError:
            raise ParameterError("inbox", f"the fields of round {name} ({', '.join(taken.parameters)})",
                                 sorted(fields)) from None
        out = method(**fields)
        body, message = self._auth(), b""
        if round_.to_server and round_.seal:  # to a party the server relays to (TSS's S2), which it cannot read
            message = self._seal(out.message, *self.task.sealed_to(round_, self.user, fields))
        elif round_.to_server:
            message = self._plain(out.message)
        if round_.to_server:
            body["message"] = message
        body["signature"] = self._sign(number, None, message)
        if round_.relay:  # to the users of the signed roster (those it left out are round-1 dropouts)
            relayed = {k: m for k, m in out.relayed.items() if k in self.prove(out.relayed).users}
            if not set(relayed) <= set(keys):
                raise ParameterError("public_keys", "a key for each recipient his role sends to",
                                     f"none for users {sorted(set(relayed) - set(keys))[:5]}")
            body[round_.relay], seed = [], self.roster().graph_seed
            for k, relayed in relayed.items():
                sealed = self._seal(relayed, keys[k], relay_info(round_, self.task.task_id, self.user, k))
                signed = sealed + (protocol.bound(self.task.parameters, seed, self.user, k, out.message)
                                   if round_.binds else b"")
                body[round_.relay].append({"recipient": k, "sealed": sealed, "signature": self._sign(number, k, signed)})
        self._call(f"round{number}", body, ("already_sent",), True)
        return True

    def _keys(self, served) -> dict[int, bytes]:
        """The X25519 keys of his recipients as the server named them (``public_keys``), each the signed roster's:
        a key the roster does not list for that user is refused (ParameterError ``public_keys``), before his role
        answers."""
        users = self.roster().users
        if not isinstance(served, list):
            raise ParameterError("public_keys", "a list of his recipients' keys", type(served).__name__)
        keys = {}
        for entry in served:
            k, key = (entry.get("user"), entry.get("public_key")) if isinstance(entry, dict) else (None, None)
            if k not in users or key != users[k][1]:
                raise ParameterError("public_keys", "each recipient's X25519 key as the organisation's signed roster "
                                     "lists it", f"another key for user {k!r}: the server swapped it")
            keys[k] = users[k][1]
        return keys

    def _delivered(self, round_, entries: list, fields: dict) -> dict[int, bytes | None]:
        """The messages relayed to him, by sender: each signed by its sender (in the signed roster) for this task,
        round and recipient, with the inbox's entry of the relaying round's ``binds`` from that sender (DPDS's
        commitments to his shares), else refused (ParameterError naming it: the server forged, replayed or altered
        it, or what it shows with it); None for one that is duly signed but does not open (its sender's fault,
        provable by the signed ciphertext: his role blames him)."""
        protocol = self.protocol
        relay = next(r for r in protocol.rounds if r.relay == round_.delivers)
        number, out, bound = protocol.number(relay.name), {}, fields.get(relay.binds, {}) if relay.binds else {}
        _shaped(f"inbox.{relay.binds}", bound, dict, "an object sender -> message")
        if not isinstance(entries, list):
            raise ParameterError(round_.delivers, "a list of the messages relayed to him", type(entries).__name__)
        for e in entries:
            e = e if isinstance(e, dict) else {}
            sender, sealed = e.get("sender"), _bytes(e.get("sealed"))
            signed = sealed + _bytes(bound.get(sender, b""))
            self._check_signed(sender, e.get("signature"), signed, number, self.user,
                               f"{round_.delivers}[{sender!r}].signature")
            out[sender] = self._open(sealed, relay_info(relay, self.task.task_id, sender, self.user))
            if out[sender] is None:
                self.unopened[(number, sender)] = signed, _bytes(e.get("signature"))
        return out


def _bytes(value) -> bytes:
    """A bytes field the server sent; empty for anything else (a check that follows refuses it)."""
    return value if isinstance(value, bytes) else b""


def _request(url: str, body: bytes | None, timeout: float, attempts: int, ok_conflicts: tuple[str, ...] = (),
             media_type: str = "application/json") -> bytes | None:
    """The answer's body; retried on no answer or a busy server, SubmitError on a refusal (a 409 whose reason is in
    ``ok_conflicts`` is an answer, None: a retry of a request that arrived). A connection per request: kept-alive
    connections ran far slower on this host's loopback (bench part 16)."""
    headers = {} if body is None else {"content-type": media_type}
    for attempt in range(attempts):
        request = urllib.request.Request(url, data=body, headers=headers, method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.read()
        except urllib.error.HTTPError as err:
            detail = err.read()
            try:
                reason = json.loads(detail).get("error")
            except ValueError:
                reason = None
            if err.code == 409 and reason in ok_conflicts:
                return None
            if err.code not in RETRY_STATUSES or attempt == attempts - 1:
                raise SubmitError(err.code, detail.decode(errors="replace")[:300]) from None
        except (urllib.error.URLError, OSError) as err:
            if attempt == attempts - 1:
                raise SubmitError(None, str(err)) from None
        time.sleep(min(2.0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")
