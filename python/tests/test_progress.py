"""progress=True on shoal.map and shoal.as_completed: a tqdm bar on stderr
(python3-tqdm); without tqdm, one warning and the same results."""

import os
import sys

import pytest

import shoal
from shoal import _progress
import ctltasks


@pytest.fixture(scope="module")
def client():
    with shoal.start_node(2, store_bytes="128M") as n:
        c = shoal.connect(job_id=n.job_id)
        yield c
        shoal.disconnect()


def _final_bar(err, desc):
    # tqdm redraws with '\r'; the last state is the last segment naming it.
    parts = [p for p in err.replace("\n", "\r").split("\r") if desc in p]
    assert parts, f"no {desc} bar on stderr: {err!r}"
    return parts[-1]


def test_map_shows_a_bar(client, capsys):
    pytest.importorskip("tqdm")
    out = list(shoal.map(ctltasks.slow_square, range(20), progress=True))
    assert out == [i * i for i in range(20)]
    last = _final_bar(capsys.readouterr().err, "shoal.map")
    assert "20/20" in last and "100%" in last


def test_chunked_map_counts_items(client, capsys):
    pytest.importorskip("tqdm")
    out = list(client.map(ctltasks.slow_square, range(25), chunksize=4,
                          progress=True))
    assert out == [i * i for i in range(25)]
    assert "25/25" in _final_bar(capsys.readouterr().err, "shoal.map")


def test_as_completed_shows_a_bar(client, capsys):
    pytest.importorskip("tqdm")
    fs = [client.submit(ctltasks.slow_square, i) for i in range(12)]
    got = sorted(f.result() for f in shoal.as_completed(fs, progress=True))
    assert got == sorted(i * i for i in range(12))
    last = _final_bar(capsys.readouterr().err, "as_completed")
    assert "12/12" in last


def test_without_tqdm_one_line_once_and_no_bar(client, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    monkeypatch.setattr(_progress, "_warned", False)
    assert list(shoal.map(ctltasks.slow_square, range(5),
                          progress=True)) == [0, 1, 4, 9, 16]
    fs = [client.submit(ctltasks.slow_square, i) for i in range(3)]
    assert len(list(shoal.as_completed(fs, progress=True))) == 3
    assert list(client.map(ctltasks.slow_square, range(3), chunksize=2,
                           progress=True)) == [0, 1, 4]
    err = capsys.readouterr().err
    assert err == ("shoal: progress=True shows no bar: tqdm is not installed "
                   "(apt install python3-tqdm, or pip install tqdm)\n"), err


def test_no_bar_by_default(client, capsys):
    assert list(shoal.map(ctltasks.slow_square, range(4))) == [0, 1, 4, 9]
    assert "shoal.map" not in capsys.readouterr().err
