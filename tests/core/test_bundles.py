"""The bundle format (core/bundles.py) on its own: written and read back, deterministic, and refused for
every kind of tampering — a changed byte of a file, a changed manifest field, another key, a file added or
removed, a link or a path that leaves the folder."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from smrweb.core import bundles

KEY = bundles.signing_key("test-secret-key")
ARTIFACT = bytes(range(256)) * 3 + b"class Optimizer:\n    def step(self): ...\n"


def make(tmp_path, key=KEY, entries=None, name="b.tar.gz", **manifest) -> str:
    entries = entries or [
        bundles.Entry("artifact/optimizer.py", data=ARTIFACT),
        bundles.Entry("kickoff.txt", data="tune the warm-up ✓".encode()),
        bundles.Entry("validator/check.py", data=b"print('ok')\n"),
    ]
    path = tmp_path / name
    with open(path, "wb") as out:
        bundles.write(
            out,
            root="smrweb-bundle-hill-7",
            manifest={"claimed_score": 0.83, "submission": {"id": 7}, **manifest},
            entries=entries,
            key=key,
            mtime=1_700_000_000,
        )
    return str(path)


def members(path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


def repack(path, changed: dict[str, bytes | None], out_path=None, extra: list[tarfile.TarInfo] = ()) -> str:
    """The bundle with some members' bytes replaced (None: removed) and `extra` members added."""
    out_path = out_path or path
    old = members(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in old.items():
            data = changed.get(name, data) if name in changed else data
            if name in changed and changed[name] is None:
                continue
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    with open(out_path, "wb") as fh:
        fh.write(buf.getvalue())
    return str(out_path)


def test_a_bundle_round_trips_with_every_file_digested(tmp_path):
    path = make(tmp_path)
    opened = bundles.open_bundle(path, [KEY.public_key()], tmp_path / "out")
    assert opened.key_id == bundles.key_id(KEY)
    m = opened.manifest
    assert m["format"] == bundles.FORMAT and m["key_id"] == bundles.key_id(KEY)
    assert m["claimed_score"] == 0.83 and m["submission"] == {"id": 7}
    assert set(m["files"]) == {"artifact/optimizer.py", "kickoff.txt", "validator/check.py"}
    assert m["files"]["artifact/optimizer.py"] == {
        "sha256": hashlib.sha256(ARTIFACT).hexdigest(),
        "size": len(ARTIFACT),
    }
    assert opened.file("artifact/optimizer.py").read_bytes() == ARTIFACT
    assert opened.file("kickoff.txt").read_text() == "tune the warm-up ✓"
    # One folder, the manifest and its signature first.
    names = list(members(path))
    assert names[:3] == [
        "smrweb-bundle-hill-7",
        "smrweb-bundle-hill-7/manifest.json",
        "smrweb-bundle-hill-7/manifest.json.sig",
    ]


def test_the_same_input_gives_the_same_bytes(tmp_path):
    first, second = make(tmp_path, name="1.tar.gz"), make(tmp_path, name="2.tar.gz")
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()


def test_the_key_is_derived_from_the_secret_and_nothing_else():
    again = bundles.signing_key("test-secret-key")
    assert bundles.public_bytes(again) == bundles.public_bytes(KEY)
    assert bundles.public_bytes(bundles.signing_key("another-secret")) != bundles.public_bytes(KEY)
    assert bundles.signing_key(b"test-secret-key").sign(b"m") == KEY.sign(b"m")  # Ed25519 is deterministic
    assert len(bundles.key_id(KEY)) == 16


def test_a_published_key_loads_in_every_form_people_pass():
    described = bundles.describe_key(KEY)
    for text in (
        json.dumps(described),
        described["public_key_pem"],
        described["public_key"],
        json.dumps({**bundles.describe_key(bundles.signing_key("new")), "previous": [described]}),
    ):
        keys = bundles.load_public_keys(text)
        assert bundles.key_id(KEY) in {bundles.key_id(k) for k in keys}
    for bad, message in (
        ("not a key", "neither JSON, PEM nor base64"),
        (base64.b64encode(b"short").decode(), "32 bytes"),
        ("{}", "public_key"),
        ("{broken", "not valid JSON"),
    ):
        with pytest.raises(ValueError, match=message):
            bundles.load_public_keys(bad)


def refused(path, tmp_path, match: str, keys=None) -> None:
    with pytest.raises(bundles.BundleRefused, match=match):
        bundles.open_bundle(path, keys or [KEY.public_key()], Path(tempfile.mkdtemp(dir=tmp_path)))


def test_a_changed_artifact_byte_is_refused(tmp_path):
    path = make(tmp_path)
    changed = bytearray(ARTIFACT)
    changed[100] ^= 0x01
    repack(path, {"smrweb-bundle-hill-7/artifact/optimizer.py": bytes(changed)})
    refused(path, tmp_path, r"artifact/optimizer.py does not match the manifest: .* the file was changed")


def test_a_changed_manifest_field_is_refused(tmp_path):
    path = make(tmp_path)
    name = "smrweb-bundle-hill-7/manifest.json"
    manifest = json.loads(members(path)[name])
    manifest["claimed_score"] = 0.99
    repack(path, {name: bundles.manifest_bytes(manifest)})
    refused(path, tmp_path, "the signature does not match the manifest .*: the manifest was changed")


def test_a_manifest_edited_to_match_a_changed_file_is_still_refused(tmp_path):
    path = make(tmp_path)
    name = "smrweb-bundle-hill-7/manifest.json"
    other = b"class Optimizer:\n    def step(self): return 'cheat'\n"
    manifest = json.loads(members(path)[name])
    manifest["files"]["artifact/optimizer.py"] = {
        "sha256": hashlib.sha256(other).hexdigest(),
        "size": len(other),
    }
    repack(
        path, {name: bundles.manifest_bytes(manifest), "smrweb-bundle-hill-7/artifact/optimizer.py": other}
    )
    refused(path, tmp_path, "the manifest was changed")


def test_another_key_is_refused_and_named(tmp_path):
    path = make(tmp_path)
    stranger = Ed25519PrivateKey.generate().public_key()
    refused(path, tmp_path, f"signed by key {bundles.key_id(KEY)}, not by the key you trust", [stranger])
    # A bundle a stranger signed with their own key is refused against the server's key.
    forged = make(tmp_path, key=bundles.signing_key("attacker"), name="forged.tar.gz")
    refused(forged, tmp_path, "not by the key you trust")


def test_added_and_removed_files_are_refused(tmp_path):
    path = make(tmp_path)
    added = tarfile.TarInfo("smrweb-bundle-hill-7/validator/evil.py")
    added.size = 3
    repack(path, {}, tmp_path / "added.tar.gz", extra=[added])
    refused(
        tmp_path / "added.tar.gz", tmp_path, "files the manifest does not list were added: validator/evil.py"
    )
    repack(path, {"smrweb-bundle-hill-7/kickoff.txt": None}, tmp_path / "removed.tar.gz")
    refused(tmp_path / "removed.tar.gz", tmp_path, "files the manifest lists are missing: kickoff.txt")


@pytest.mark.parametrize(
    "name, kind, message",
    [
        ("smrweb-bundle-hill-7/../escape.txt", tarfile.REGTYPE, "not a safe, unique path"),
        ("other-folder/x.txt", tarfile.REGTYPE, "outside the bundle's folder"),
        ("smrweb-bundle-hill-7/link", tarfile.SYMTYPE, "not a regular file"),
        ("smrweb-bundle-hill-7/hard", tarfile.LNKTYPE, "not a regular file"),
    ],
)
def test_members_that_leave_the_folder_or_are_links_are_refused_before_anything_is_written(
    tmp_path, name, kind, message
):
    path = make(tmp_path)
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd" if kind != tarfile.REGTYPE else ""
    info.size = 1 if kind == tarfile.REGTYPE else 0
    repack(path, {}, extra=[info])
    refused(path, tmp_path, message)
    assert not (tmp_path / "escape.txt").exists()


def test_what_is_not_a_bundle_is_refused_with_the_reason(tmp_path):
    (tmp_path / "plain.txt").write_text("hello")
    refused(tmp_path / "plain.txt", tmp_path, "not a bundle")
    refused(tmp_path / "missing.tar.gz", tmp_path, "no such file")
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(open(make(tmp_path), "rb").read()[:300])
    refused(truncated, tmp_path, "damaged|not a bundle|no manifest")
    bare = tmp_path / "bare.tar.gz"
    with tarfile.open(bare, "w:gz") as tar:
        info = tarfile.TarInfo("x/readme.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    refused(bare, tmp_path, "no manifest.json and manifest.json.sig")
    gz = tmp_path / "gz.tar.gz"
    gz.write_bytes(gzip.compress(b"not a tar"))
    refused(gz, tmp_path, "not a bundle|damaged")
