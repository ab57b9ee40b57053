"""A long list's rows, each rendered once per its version (`live.kept_rows`): the shared cache holds them
for every process, and each process keeps its own copies of the rows it showed, so a poll after a turn
reads the new row from the shared cache, not the rows it already has (issue 36, item 5)."""

from __future__ import annotations

from django.core.cache import cache

from smrweb.core import localcache, softcache
from smrweb.dashboard import live


class Recording:
    def __init__(self, backend):
        self.backend, self.read = backend, []

    def __getattr__(self, method):
        original = getattr(self.backend, method)
        if method != "get_many":
            return original
        return lambda keys, *a, **k: self.read.append(len(keys)) or original(keys, *a, **k)


def rows(*ids: int) -> list[tuple[str, int]]:
    return [(f"v{i}", i) for i in ids]


def render_into(made: list):
    def render(items: list) -> str:
        made.append(list(items))
        return "".join(f'<!--p:row-{i}--><tr id="row-{i}"><td>{i}</td></tr><!--/p-->' for i in items)

    return render


def test_a_process_reads_only_the_rows_it_has_not_shown(monkeypatch):
    recording = Recording(softcache.cache)
    monkeypatch.setattr(softcache, "cache", recording)
    made: list = []
    first = live.kept_rows("run-1", rows(3, 2, 1), render_into(made))
    assert made == [[3, 2, 1]] and recording.read == [3]
    assert first[0] == '<!--p:row-3--><tr id="row-3"><td>3</td></tr><!--/p-->'

    after_a_turn = live.kept_rows("run-1", rows(4, 3, 2), render_into(made))
    assert made[1:] == [[4]] and recording.read[1:] == [1]  # the new row alone is asked for and made
    assert after_a_turn[1:] == first[:2]

    assert live.kept_rows("run-1", rows(4, 3, 2), render_into(made)) == after_a_turn
    assert len(made) == 2 and recording.read[2:] == []  # nothing new: no cache round trip at all

    localcache.clear()  # another process: it reads the rows this one rendered, and renders none
    assert live.kept_rows("run-1", rows(4, 3, 2), render_into(made)) == after_a_turn
    assert len(made) == 2 and recording.read[2:] == [3]


def test_a_row_is_rendered_again_when_neither_copy_is_kept():
    made: list = []
    live.kept_rows("run-1", rows(1, 2), render_into(made))
    cache.clear()
    localcache.clear()
    assert live.kept_rows("run-1", rows(1, 2), render_into(made))[1].startswith("<!--p:row-2-->")
    assert made == [[1, 2], [1, 2]]


def test_a_process_keeps_a_bounded_number_of_rows_per_page_newest_first():
    made: list = []
    live.kept_rows("run-1", rows(*range(150)), render_into(made))
    live.kept_rows("run-1", rows(*range(1000, 1100)), render_into(made))  # the page's other list
    kept = localcache.get(("kept-rows", "run-1"))
    assert len(kept) == live.LOCAL_ROWS
    assert all(k in kept for k in list(kept)[-100:])
    shown = [k for k in kept if k.endswith(tuple(f"v{i}" for i in range(1000, 1100)))]
    assert len(shown) == 100  # the list just shown is whole; the other list's newest 100 stay
