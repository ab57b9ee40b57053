"""core.markdown: what people write is shown as Markdown, never as HTML or script of theirs."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from smrweb.core import markdown

MEMBERS = {"bob": "bob", "alice": "Alice"}

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](java\tscript:alert(1))",
    "[click](  javascript:alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<javascript:alert(1)>",
    "<div onclick=alert(1) style=color:red>raw</div>",
    "<iframe src=https://evil.example></iframe>",
    "<!-- comment --><svg onload=alert(1)>",
    '[x](https://ok.example "a" onmouseover=alert(1))',
    "```html\n<script>alert(1)</script>\n```",
    "`<script>alert(1)</script>`",
]


class _Elements(HTMLParser):
    """Every element and attribute of a piece of HTML, as a browser would build them."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


ALLOWED_ATTRIBUTES = {"a": {"href", "title", "rel"}, "ol": {"start"}, "span": {"class", "title"}}


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markdown_renders_inert(text):
    html = markdown.render(text, members=MEMBERS)
    for tag, attrs in _Elements(html).found:
        assert tag in markdown.TAGS, (text, html)
        assert set(attrs) <= ALLOWED_ATTRIBUTES.get(tag, set()), (text, html)
        href = (attrs.get("href") or "").strip().lower()
        assert not href or href.startswith(("https:", "http:", "mailto:", "/")), (text, html)
        if tag == "a":
            assert attrs["rel"] == "noopener noreferrer nofollow"
        if tag == "span":
            assert attrs.get("class") == "mention"
    assert "<!--" not in html


def test_raw_html_is_shown_as_text():
    assert markdown.render("<b>bold?</b>") == "<p>&lt;b&gt;bold?&lt;/b&gt;</p>\n"


def test_markdown_is_rendered_with_safe_links():
    html = markdown.render("**b** _i_ ~~s~~ `c`\n\n- one\n- [two](https://example.com)\n\n> quote")
    assert "<strong>b</strong>" in html and "<em>i</em>" in html and "<s>s</s>" in html
    assert "<code>c</code>" in html and "<li>one</li>" in html and "<blockquote>" in html
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">two</a>' in html


def test_a_line_break_is_kept_and_tables_render():
    assert "<br>" in markdown.render("one\ntwo")
    assert "<td>1</td>" in markdown.render("| a |\n|---|\n| 1 |")


def test_images_load_nothing():
    html = markdown.render("![pixel](https://tracker.example/p.gif)")
    assert "<img" not in html and 'href="https://tracker.example/p.gif"' in html


def test_the_sanitizer_alone_strips_what_the_parser_might_let_through():
    dirty = (
        '<p onclick="x"><a href="javascript:alert(1)">a</a>'
        + '<span class="evil mention">m</span><script>s</script></p>'
    )
    assert (
        markdown.clean(dirty)
        == '<p><a rel="noopener noreferrer nofollow">a</a><span class="mention">m</span></p>'
    )


def test_mentions_of_members_are_highlighted_and_collected_case_insensitively():
    text = "ping @BOB and @alice. also @carol, mail bob@example.com, `@bob` and [@bob](https://x.example)"
    html = markdown.render(text, members=MEMBERS)
    assert html.count('class="mention"') == 2
    assert '<span class="mention" title="@Alice">@Alice</span>.' in html
    assert "@carol" in html and "bob@example.com" in html
    assert markdown.mentions(text, MEMBERS) == ["bob", "Alice"]
    assert markdown.mentions("@bob @bob @Bob", MEMBERS) == ["bob"]
    assert markdown.mentions("no one", MEMBERS) == [] and markdown.mentions("@bob", {}) == []


def test_a_mention_cannot_smuggle_markup():
    members = {"x": "x"}
    assert markdown.render("@x<script>", members=members).count("<script") == 0


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("tried #approach: bigger batch", True),
        ("#Approach at the start", True),
        ("(#approach)", True),
        ("#approaches are many", False),
        ("a#approach", False),
        ("##approach", False),
        ("&#approach;", False),
        ("no tag", False),
    ],
)
def test_hashtags_are_words_of_their_own(text, found):
    assert markdown.has_hashtag(text, "approach") is found
