def test_atomic_writes_leave_no_temp_file_and_normal_permissions(tmp_path):
    import os

    from stages.lib.io import write_bytes

    write_bytes(tmp_path / "a" / "out.bin", b"x")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["out.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a" / "out.bin").stat().st_mode & 0o777 == 0o666 & ~umask
