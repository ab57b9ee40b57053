"""Markdown that people write (run notes, comments) turned into HTML that is safe to show, and the
@mentions in it. Bounded twice: markdown-it-py parses with raw HTML off, images off and dangerous link
schemes refused (its `js-default` preset), then nh3 (ammonia) keeps only a small set of tags and
attributes, only http(s) and mailto links, and gives every link `rel="noopener noreferrer nofollow"`.

Pure: no smrweb imports. Who may be mentioned is passed in (`members`: lower-cased name → name), so the
same parse decides what is highlighted on the page and who is notified."""

from __future__ import annotations

import re
from collections.abc import Mapping

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

TAGS = frozenset(
    {
        "p",
        "br",
        "hr",
        "strong",
        "em",
        "s",
        "del",
        "code",
        "pre",
        "blockquote",
        "ul",
        "ol",
        "li",
        "a",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "span",
    }
)
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "span": {"title"}}
CLASSES = {"span": {"mention"}}  # the only class that survives: what `_mentions` writes
LINK_REL = "noopener noreferrer nofollow"
URL_SCHEMES = frozenset({"http", "https", "mailto"})

# `@name` not glued to a word before it (an e-mail address is not a mention); names are what Django's
# usernames allow but "@" (such names cannot be mentioned). A trailing "." ends the sentence, not the name.
MENTION_RE = re.compile(r"(?<![\w@/])@([\w.+-]+)")


def _mention_name(raw: str) -> str:
    return raw.rstrip(".")


def _mentions(state: StateCore) -> None:
    """Core rule: `@name` in plain text (not in code, not inside a link) of a name in `env["members"]`
    becomes <span class="mention">; every such name is collected in `env["mentioned"]`, in order."""
    members: Mapping[str, str] = state.env.get("members") or {}
    mentioned: list[str] = state.env.setdefault("mentioned", [])
    if not members:
        return
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        in_link = 0
        for token in block.children:
            in_link += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type != "text" or in_link or "@" not in token.content:
                children.append(token)
                continue
            children += _split(token.content, members, mentioned)
        block.children = children


def _split(text: str, members: Mapping[str, str], mentioned: list[str]) -> list[Token]:
    out: list[Token] = []
    start = 0
    for match in MENTION_RE.finditer(text):
        name = members.get(_mention_name(match[1]).lower())
        if name is None:
            continue  # an unknown name stays plain text
        end = match.start() + 1 + len(_mention_name(match[1]))
        out.append(_text(text[start : match.start()]))
        opening = Token("mention_open", "span", 1, attrs={"class": "mention", "title": f"@{name}"})
        out += [opening, _text(f"@{name}"), Token("mention_close", "span", -1)]
        if name not in mentioned:
            mentioned.append(name)
        start = end
    out.append(_text(text[start:]))
    return [t for t in out if t.type != "text" or t.content]


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


def _parser() -> MarkdownIt:
    # js-default: markdown-it's default preset (CommonMark plus tables and strikethrough), html off.
    md = MarkdownIt("js-default", {"html": False, "linkify": False, "typographer": False, "breaks": True})
    md.disable("image")  # an image is a request to wherever it points: it stays a link to it
    md.core.ruler.push("mentions", _mentions)
    return md


_MD = _parser()


def render(text: str, *, members: Mapping[str, str] | None = None) -> str:
    """`text` (Markdown) as sanitized HTML; `@name` of one of `members` is highlighted."""
    html = _MD.render(text or "", {"members": members or {}})
    return clean(html)


def clean(html: str) -> str:
    """The sanitizer alone: the allow-listed tags and attributes, safe link schemes, links that open
    nothing of ours to where they point."""
    return nh3.clean(
        html,
        tags=set(TAGS),
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
        allowed_classes={tag: set(names) for tag, names in CLASSES.items()},
        link_rel=LINK_REL,
        url_schemes=set(URL_SCHEMES),
        strip_comments=True,
    )


def mentions(text: str, members: Mapping[str, str]) -> list[str]:
    """The members (their names as given in `members`) that `text` mentions, in order of first mention;
    unknown names, names in code and names inside links are not mentions."""
    env: dict = {"members": members}
    _MD.parse(text or "", env)
    return list(env.get("mentioned", []))


HASHTAG_RE = re.compile(r"(?<![\w#&])#([A-Za-z][\w-]*)")


def has_hashtag(text: str, tag: str) -> bool:
    """Whether `#tag` appears in `text` as a word of its own (case-insensitive; `#approaches` is not
    `#approach`)."""
    tag = tag.lower()
    return any(m[1].lower() == tag for m in HASHTAG_RE.finditer(text or ""))
