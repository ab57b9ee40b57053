"""Reproducibility bundles: the one format, written by the server and read by `smrweb rescore`.

A bundle is a gzipped tar with one top-level folder holding

* `manifest.json`: what identifies the submission (project, run, ids, times, claimed score), the
  scenario (key, version, bounds, validator), the kickoff, the model profile, the verification the
  server recorded, and `files`: the sha256 and size of **every other file** in the bundle;
* `manifest.json.sig`: an Ed25519 signature over the exact bytes of `manifest.json`, with the id of the
  key that made it;
* the files the manifest lists: the artifact (`artifact/<name>`), the validator scripts the scenario's
  command runs (`validator/<name>`), the validator's recorded output and the kickoff text.

So one signature covers everything: a changed byte of any file no longer matches its digest, a changed
manifest no longer matches the signature, an added or removed file no longer matches `files`.

The signing key is derived from the server's SECRET_KEY by HKDF-SHA256 with a fixed label: the same on
every process of one installation and after a restart, never stored, and a different key for a different
secret. Its public half is published without authentication (`GET /api/v1/bundle-key`), so anyone can
check a bundle against the server that made it, or against a key a reviewer pinned.

Bundles are deterministic: members in name order, owner 0, mode 0644, one fixed mtime (the submission's
creation) and a zero gzip timestamp, so the same submission on the same server gives the same bytes.

Pure module (no Django, no other smrweb module): `smrweb.cli` imports it to verify.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

FORMAT = "smrweb-bundle/1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
ALGORITHM = "ed25519"
# The HKDF label: changing it changes every installation's key (a new format version would).
KEY_INFO = b"smrweb.bundle-signing-key.ed25519.v1"
KEY_SALT = b"smrweb.bundle"
# What a reader extracts at most (a gzip bomb stops here); a bundle holds one artifact and a few scripts.
MAX_BYTES = 8 * 1024**3
MAX_MEMBERS = 1000
_MANIFEST_MAX = 16 * 1024**2
_CHUNK = 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._ +@=,-]{0,199}")


class BundleRefused(Exception):
    """The bundle cannot be trusted (tampered, signed by another key, malformed): the message says why."""


# --- keys -----------------------------------------------------------------------------------------


def signing_key(secret: str | bytes) -> Ed25519PrivateKey:
    """The installation's bundle signing key, derived from its SECRET_KEY (HKDF-SHA256, fixed label)."""
    material = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=KEY_SALT, info=KEY_INFO).derive(material)
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_bytes(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """A key's fingerprint: the first 16 hex digits of the sha256 of its 32 raw bytes."""
    return hashlib.sha256(public_bytes(key)).hexdigest()[:16]


def describe_key(key: Ed25519PublicKey | Ed25519PrivateKey) -> dict:
    """A public key as published: algorithm, id, raw bytes in base64 and PEM."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return {
        "algorithm": ALGORITHM,
        "key_id": key_id(key),
        "public_key": base64.b64encode(public_bytes(key)).decode("ascii"),
        "public_key_pem": pem.decode("ascii"),
    }


def load_public_keys(text: str) -> list[Ed25519PublicKey]:
    """Public keys from what a person passes: the key endpoint's JSON (its key and `previous` keys), a
    PEM block, or the 32 raw bytes in base64. ValueError saying what it is not."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc.msg}") from None
        found = [data] + list(data.get("previous") or []) if isinstance(data, dict) else []
        keys = [
            load_public_keys(str(item["public_key"]))
            for item in found
            if isinstance(item, dict) and item.get("public_key")
        ]
        if not keys:
            raise ValueError('JSON without a "public_key"')
        return [k for group in keys for k in group]
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as exc:
            raise ValueError(f"not a PEM public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("the PEM key is not an Ed25519 key")
        return [key]
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise ValueError("neither JSON, PEM nor base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes, this is {len(raw)}")
    return [Ed25519PublicKey.from_public_bytes(raw)]


# --- the manifest ---------------------------------------------------------------------------------


def manifest_bytes(manifest: dict) -> bytes:
    """The manifest as stored and signed: sorted keys, two-space indent, UTF-8, no NaN."""
    return (
        json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    ).encode()


def safe_name(name: str) -> str:
    """One path segment a bundle may hold (a validator's or artifact's name, cut down)."""
    name = re.split(r"[/\\]", name or "")[-1].strip()
    name = "".join(ch if _NAME.fullmatch(ch) or ch in " +@=," else "_" for ch in name)[:200].strip(" .")
    return name if name and name not in (".", "..") and _NAME.fullmatch(name) else "file"


def _safe_member(relative: str) -> bool:
    path = PurePosixPath(relative)
    return (
        bool(relative)
        and not path.is_absolute()
        and "\\" not in relative
        and "\x00" not in relative
        and all(part not in ("", ".", "..") for part in relative.split("/"))
        and len(path.parts) <= 4
    )


# --- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One file of a bundle: its name inside the bundle's folder and its bytes (or a file holding them)."""

    name: str
    data: bytes | None = None
    path: Path | None = None

    def open(self) -> BinaryIO:
        return open(self.path, "rb") if self.path is not None else io.BytesIO(self.data or b"")

    def digest(self) -> tuple[str, int]:
        h, size = hashlib.sha256(), 0
        with self.open() as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
                size += len(chunk)
        return h.hexdigest(), size


def write(
    out: BinaryIO, *, root: str, manifest: dict, entries: Iterable[Entry], key: Ed25519PrivateKey, mtime: int
) -> dict:
    """Write the signed bundle to `out`: `manifest` gains `format`, `key_id` and `files` (every entry's
    sha256 and size). Returns the manifest as written."""
    entries = sorted(entries, key=lambda e: e.name)
    names = [e.name for e in entries]
    if len(set(names)) != len(names) or any(not _safe_member(n) or n in (MANIFEST, SIGNATURE) for n in names):
        raise ValueError(f"bundle entry names must be distinct safe paths: {names}")
    files = {}
    for entry in entries:
        sha256, size = entry.digest()
        files[entry.name] = {"sha256": sha256, "size": size}
    manifest = {**manifest, "format": FORMAT, "key_id": key_id(key), "files": files}
    body = manifest_bytes(manifest)
    signature = (
        json.dumps(
            {
                "algorithm": ALGORITHM,
                "key_id": key_id(key),
                "signature": base64.b64encode(key.sign(body)).decode("ascii"),
            },
            sort_keys=True,
            indent=2,
        ).encode()
        + b"\n"
    )
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_info(root + "/", 0, mtime, directory=True))
            for name, data in ((MANIFEST, body), (SIGNATURE, signature)):
                tar.addfile(_info(f"{root}/{name}", len(data), mtime), io.BytesIO(data))
            for entry in entries:
                with entry.open() as fh:
                    tar.addfile(_info(f"{root}/{entry.name}", files[entry.name]["size"], mtime), fh)
    return manifest


def _info(name: str, size: int, mtime: int, *, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.rstrip("/") if directory else name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.size = 0 if directory else size
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# --- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opened:
    """A bundle whose signature and digests hold, extracted under `folder`."""

    manifest: dict
    folder: Path
    key_id: str

    def file(self, name: str) -> Path:
        return self.folder / name


def open_bundle(source: str | os.PathLike[str], keys: list[Ed25519PublicKey], into: Path) -> Opened:
    """Check and extract the bundle at `source` under the (empty) folder `into`: BundleRefused unless
    its manifest is signed by one of `keys` and every file matches the manifest, and no other file is
    there. Nothing outside `into` is written; only regular files are extracted."""
    try:
        tar = tarfile.open(source, mode="r:gz")
    except FileNotFoundError:
        raise BundleRefused(f"{source}: no such file") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleRefused(f"not a bundle (a gzipped tar): {exc}") from None
    seen: dict[str, tuple[str, int]] = {}
    manifest_raw = signature_raw = None
    root = None
    total = 0
    try:
        with tar:
            for count, member in enumerate(_members(tar)):
                if count >= MAX_MEMBERS:
                    raise BundleRefused(f"more than {MAX_MEMBERS} entries: not a bundle this server made")
                top, _, relative = member.name.partition("/")
                root = root if root is not None else top
                if top != root:
                    raise BundleRefused(f"{member.name!r} is outside the bundle's folder {root!r}")
                if member.isdir() and not relative.strip("/"):
                    continue
                if not member.isfile():
                    raise BundleRefused(
                        f"{member.name!r} is not a regular file (links and devices are refused)"
                    )
                if not _safe_member(relative) or relative in seen:
                    raise BundleRefused(f"{member.name!r} is not a safe, unique path inside the bundle")
                total += member.size
                if total > MAX_BYTES:
                    raise BundleRefused(f"larger than {MAX_BYTES:,} bytes unpacked")
                source_fh = tar.extractfile(member)
                if relative in (MANIFEST, SIGNATURE):
                    if member.size > _MANIFEST_MAX:
                        raise BundleRefused(f"{relative} is larger than {_MANIFEST_MAX:,} bytes")
                    data = source_fh.read()
                    if relative == MANIFEST:
                        manifest_raw = data
                    else:
                        signature_raw = data
                    seen[relative] = ("", len(data))
                    continue
                target = into / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                h, size = hashlib.sha256(), 0
                with open(target, "xb") as out:
                    while chunk := source_fh.read(_CHUNK):
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
                seen[relative] = (h.hexdigest(), size)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleRefused(f"the bundle is damaged: {exc}") from None
    if manifest_raw is None or signature_raw is None:
        raise BundleRefused(f"no {MANIFEST} and {SIGNATURE}: not a bundle")
    signed_by = _check_signature(manifest_raw, signature_raw, keys)
    try:
        manifest = json.loads(manifest_raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleRefused(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleRefused(f"{MANIFEST} is not a {FORMAT} manifest")
    _check_files(manifest, {k: v for k, v in seen.items() if k not in (MANIFEST, SIGNATURE)})
    return Opened(manifest, into, signed_by)


def _members(tar: tarfile.TarFile):
    while (member := tar.next()) is not None:
        yield member


def _check_signature(body: bytes, signature_raw: bytes, keys: list[Ed25519PublicKey]) -> str:
    try:
        signature = json.loads(signature_raw)
        sig = base64.b64decode(signature["signature"], validate=True)
        claimed = str(signature.get("key_id", ""))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        raise BundleRefused(f"{SIGNATURE} is not a signature this format writes") from None
    if signature.get("algorithm") != ALGORITHM:
        raise BundleRefused(f"{SIGNATURE}: unknown algorithm {signature.get('algorithm')!r}")
    for key in keys:
        try:
            key.verify(sig, body)
        except InvalidSignature:
            continue
        return key_id(key)
    given = ", ".join(key_id(k) for k in keys) or "none"
    if claimed and claimed not in {key_id(k) for k in keys}:
        raise BundleRefused(
            f"the manifest is signed by key {claimed}, not by the key you trust ({given}): check the key, or "
            "the bundle was made by another server"
        )
    raise BundleRefused(f"the signature does not match the manifest (key {given}): the manifest was changed")


def _check_files(manifest: dict, seen: dict[str, tuple[str, int]]) -> None:
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise BundleRefused(f"{MANIFEST} lists no files")
    missing = sorted(set(listed) - set(seen))
    extra = sorted(set(seen) - set(listed))
    if missing:
        raise BundleRefused(f"files the manifest lists are missing: {', '.join(missing)}")
    if extra:
        raise BundleRefused(f"files the manifest does not list were added: {', '.join(extra)}")
    for name, (sha256, size) in sorted(seen.items()):
        want = listed[name] if isinstance(listed[name], dict) else {}
        if want.get("sha256") != sha256 or want.get("size") != size:
            raise BundleRefused(
                f"{name} does not match the manifest: sha256 {sha256[:16]}… ({size:,} bytes), the manifest "
                f"says {str(want.get('sha256'))[:16]}… ({want.get('size')} bytes): the file was changed"
            )
