"""stages/lib/safefs.py: the one tree walker's order and kinds, the open guard that never
blocks on a FIFO, and the names of file modes."""
import os
import socket
import stat
import threading

import pytest

from stages.lib import safefs


def tree(root):
    """b/ (two files, a subfolder), a/ (one file), a hidden file, a FIFO, a symlink loop, a
    broken symlink, a symlinked folder and an empty folder."""
    for rel in ("z.txt", "b/2.txt", "b/1.txt", "b/c/3.txt", "a/0.txt", ".hidden"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.mkfifo(root / "fifo")
    os.symlink("loop", root / "loop")
    os.symlink("nothing", root / "broken")
    os.symlink("a", root / "link")
    (root / "empty").mkdir()


def test_walk_sorted_is_files_first_then_subfolders_depth_first(tmp_path):
    tree(tmp_path)
    top = str(tmp_path)
    got = [(e.rel, e.kind) for e in safefs.walk(top, sort=True)]
    assert got == [("", "folder"), ("broken", "broken"), ("fifo", "special"),
                   ("link", "dirlink"), ("loop", "loop"), ("z.txt", "file"),
                   ("a", "folder"), ("a/0.txt", "file"),
                   ("b", "folder"), ("b/1.txt", "file"), ("b/2.txt", "file"),
                   ("b/c", "folder"), ("b/c/3.txt", "file"),
                   ("empty", "folder"), ("empty", "empty")]
    paths = {e.rel: e.path for e in safefs.walk(top, sort=True)}
    assert paths["b/c/3.txt"] == os.path.join(top, "b", "c", "3.txt")
    assert ".hidden" in {e.rel for e in safefs.walk(top, hidden=True)}


def test_walk_unsorted_keeps_each_listing_and_pops_the_last_subfolder_first(tmp_path):
    tree(tmp_path)
    events = list(safefs.walk(tmp_path))
    folders = [e.rel for e in events if e.kind == "folder"]
    listed = [e.name for e in os.scandir(tmp_path) if e.is_dir(follow_symlinks=False)
              and not e.name.startswith(".")]
    assert folders[0] == "" and folders[1] == listed[-1]  # a stack: the last listed first
    assert sorted(e.rel for e in events) == sorted(
        e.rel for e in safefs.walk(tmp_path, sort=True))


def test_walk_follow_enters_a_linked_folder_once_after_the_real_tree(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real/x.txt").write_text("x")
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    (outside / "y.txt").write_text("y")
    os.symlink(outside, tmp_path / "a_out")
    os.symlink(tmp_path / "real", tmp_path / "b_again")  # a second way into real/
    got = [(e.rel, e.kind) for e in safefs.walk(tmp_path, sort=True, follow=True)
           if e.kind != "dirlink"]
    assert got == [("", "folder"), ("real", "folder"), ("real/x.txt", "file"),
                   ("a_out", "linked"), ("a_out", "folder"), ("a_out/y.txt", "file"),
                   ("b_again", "seen")]
    (seen,) = [e for e in safefs.walk(tmp_path, sort=True, follow=True) if e.kind == "seen"]
    assert seen.error == os.path.join(tmp_path, "real")


def test_walk_names_a_folder_it_cannot_list(tmp_path):
    entries = list(safefs.walk(tmp_path / "missing"))
    assert [e.kind for e in entries] == ["folder", "unlistable"]
    assert isinstance(entries[1].error, FileNotFoundError)


def test_open_guard_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = {}

    def try_open():
        try:
            safefs.open_regular(fifo)
        except safefs.NotRegular as exc:
            result["error"] = exc

    opener = threading.Thread(target=try_open, daemon=True)
    opener.start()
    opener.join(5)
    assert not opener.is_alive(), "open_regular blocked on a FIFO with no writer"
    assert safefs.mode_kind(result["error"].mode) == "fifo"
    with pytest.raises(safefs.NotRegular, match="a folder"):
        safefs.open_regular(tmp_path)
    (tmp_path / "f.bin").write_bytes(b"abc")
    with safefs.open_regular(tmp_path / "f.bin") as f:
        assert f.read() == b"abc"
        assert os.get_blocking(f.fileno())
    with pytest.raises(FileNotFoundError):
        safefs.open_regular(tmp_path / "none")


def test_mode_names(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        modes = {name: os.stat(tmp_path / name).st_mode for name in ("fifo", "file", "sock")}
    modes["dir"] = os.stat(tmp_path).st_mode
    modes["dev"] = os.stat("/dev/null").st_mode
    modes["link"] = stat.S_IFLNK | 0o777
    assert {k: safefs.mode_kind(m) for k, m in modes.items()} == {
        "fifo": "fifo", "file": "file", "sock": "socket", "dir": "folder", "dev": "device",
        "link": "other"}
    assert {k: safefs.mode_text(m) for k, m in modes.items()} == {
        "fifo": "a FIFO (named pipe)", "file": "not a regular file", "sock": "a socket",
        "dir": "a folder", "dev": "a device", "link": "not a regular file"}
