"""Artifact previews: highlighted on the server, hostile content escaped, size-capped, binaries described."""

from __future__ import annotations

import html
import json
import re

from pygments.token import STANDARD_TYPES

from smrweb.core import preview

TAG = re.compile(r"<[^>]*>")
TOKEN_CLASSES = set(STANDARD_TYPES.values())


def joined(p) -> str:
    return "\n".join(p.lines)


def test_python_source_is_highlighted_line_by_line():
    source = b'def f(x):\n    """doc\n    string"""\n    return x + 1\n'
    p = preview.render(source, name="submission/optimizer.py", size=len(source))
    assert (p.kind, p.language, len(p.lines)) == ("code", "Python", 4)
    assert p.lines[0].startswith('<span class="k">def</span>')
    # A docstring spanning two lines is cut into one span per line, so every line is balanced HTML.
    assert p.lines[1].endswith('<span class="sd">&quot;&quot;&quot;doc</span>')
    assert p.lines[2] == '<span class="sd">    string&quot;&quot;&quot;</span>'
    assert all(line.count("<span") == line.count("</span>") for line in p.lines)
    assert not p.truncated


def test_hostile_content_is_escaped_whatever_the_declared_type():
    hostile = (
        b'<script>alert(1)</script>\n<img src=x onerror="alert(2)">\n<a href="javascript:alert(3)">x</a>\n'
    )
    for name, content_type in [
        ("page.html", "text/html"),
        ("notes.txt", "text/html"),
        ("x.py", "text/plain"),
    ]:
        p = preview.render(hostile, name=name, size=len(hostile), content_type=content_type)
        markup = joined(p)
        assert p.kind in ("code", "text")
        # The only tags are our own token spans; take them away and the artifact's text is back, intact.
        assert set(TAG.findall(markup)) <= {"</span>"} | {f'<span class="{c}">' for c in TOKEN_CLASSES}
        assert html.unescape(TAG.sub("", markup)) + "\n" == hostile.decode()


def test_svg_is_never_an_inline_image():
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>'
    p = preview.render(svg, name="plot.svg", size=len(svg), content_type="image/svg+xml")
    assert p.kind == "code" and not p.image_uri
    assert "<svg" not in joined(p) and "<script" not in joined(p)


def test_json_is_pretty_printed_and_invalid_json_is_shown_as_stored():
    data = json.dumps({"lr": 0.001, "layers": [1, 2], "name": "<b>x</b>"}).encode()
    p = preview.render(data, name="config.json", size=len(data))
    assert p.kind == "json" and len(p.lines) == 8
    assert "<b>" not in joined(p) and "&lt;b&gt;" in joined(p)
    broken = b'{"lr": 0.001,'
    p = preview.render(broken, name="config.json", size=len(broken))
    assert p.kind == "code" and p.note.startswith("Not valid JSON")


def test_oversize_text_is_capped_with_show_more_then_download():
    line = b"x = 1  # padding to make the file large\n"
    big = line * (preview.PREVIEW_BYTES // len(line) + 500)
    p = preview.render(big[: preview.PREVIEW_BYTES + 1], name="big.py", size=len(big))
    assert p.truncated and p.can_show_more and p.shown == preview.PREVIEW_BYTES
    assert len(p.lines) <= preview.PREVIEW_BYTES // len(line) + 1
    huge_size = preview.FULL_BYTES * 3
    p = preview.render(big, name="big.py", size=huge_size, limit=preview.FULL_BYTES)
    assert p.truncated and not p.can_show_more


def test_a_minified_line_is_cut_and_says_by_how_much():
    text = ("a" * (preview.MAX_LINE_CHARS + 250)).encode()
    p = preview.render(text, name="min.js", size=len(text))
    assert p.lines[0].endswith('<span class="cut">… 250 more characters</span>')


def test_a_multibyte_character_cut_by_the_limit_is_still_text():
    text = ("é" * 200).encode()  # 400 bytes; a limit of 101 cuts the 51st character in half
    p = preview.render(text, name="notes.txt", size=len(text), limit=101)
    assert p.kind == "text" and p.truncated and joined(p) == "é" * 50


def test_raster_images_inline_and_large_ones_described():
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    p = preview.render(png, name="curve.png", size=len(png))
    assert p.kind == "image" and p.image_uri.startswith("data:image/png;base64,")
    p = preview.render(png, name="curve.png", size=preview.IMAGE_BYTES + 1)
    assert p.kind == "binary" and "too large to show inline" in p.description


def test_binaries_are_described_never_rendered():
    pickle = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94."
    p = preview.render(pickle, name="model.pkl", size=len(pickle))
    assert p.kind == "binary" and "never loaded" in p.description and not p.lines
    assert p.hexdump.startswith("00000000  80 04 95")
    latin1 = "café".encode("latin-1") + b" more bytes"
    p = preview.render(latin1, name="weird.txt", size=len(latin1))
    assert p.kind == "binary" and p.description == "binary data of an unknown type"
    zipped = b"PK\x03\x04" + b"\x00" * 30
    assert preview.render(zipped, name="ckpt.pt", size=34).description.startswith("ZIP archive")


def test_empty_and_onnx_kinds():
    assert preview.render(b"", name="empty.py", size=0).kind == "empty"
    p = preview.render(b"\x08\x07", name="policy.onnx", size=2, onnx_error="not a model")
    assert p.kind == "onnx" and p.onnx is None and p.onnx_error == "not a model"
