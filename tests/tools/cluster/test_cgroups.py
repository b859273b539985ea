"""Memory cgroup handling on v1 and v2 layouts (directory trees shaped like /sys/fs/cgroup)."""

from __future__ import annotations

import pytest

from mailrail.errors import ClusterError
from mailrail_tools.cluster import cgroups


def make_v2(root):
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return root


def make_v1(root, own="/process_api/abc"):
    base = root / "memory" / own.lstrip("/")
    base.mkdir(parents=True)
    proc = root / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(f"9:name=systemd:/\n4:memory:{own}\n3:cpuset:/\n0::/\n")
    return root, proc


def test_v2_is_found_at_the_root(tmp_path):
    assert cgroups.find_hierarchy(str(make_v2(tmp_path))) == cgroups.Hierarchy(2, str(tmp_path))


def test_v2_without_the_memory_controller_is_no_hierarchy(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    assert cgroups.find_hierarchy(str(tmp_path)) is None


def test_v1_nests_under_this_process_own_memory_group(tmp_path):
    root, proc = make_v1(tmp_path)
    hierarchy = cgroups.find_hierarchy(str(root), str(proc))
    assert hierarchy == cgroups.Hierarchy(1, str(root / "memory" / "process_api" / "abc"))
    assert hierarchy.group("mailrail-x", "n0").endswith("process_api/abc/mailrail-x/n0")


def test_no_memory_hierarchy(tmp_path):
    assert cgroups.find_hierarchy(str(tmp_path), str(tmp_path)) is None


@pytest.mark.parametrize(
    "version, limit_file, swap_file, swap_capped, lifted",
    [
        (1, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", str(2**28), "-1"),
        (2, "memory.max", "memory.swap.max", "0", "max"),
    ],
)
def test_limits_leave_no_room_in_swap_and_can_be_lifted(tmp_path, version, limit_file, swap_file, swap_capped, lifted):
    hierarchy = cgroups.Hierarchy(version, str(tmp_path))
    group = tmp_path / "g"
    group.mkdir()
    (group / swap_file).write_text(lifted)
    cgroups.set_limit(hierarchy, str(group), 2**28)
    assert (group / limit_file).read_text() == str(2**28) and (group / swap_file).read_text() == swap_capped
    assert cgroups.limit_bytes(hierarchy, str(group)) == 2**28
    cgroups.set_limit(hierarchy, str(group), None)
    assert (group / limit_file).read_text() == lifted and (group / swap_file).read_text() == lifted
    assert cgroups.limit_bytes(hierarchy, str(group)) is None


def test_v1_reports_no_limit_as_a_huge_number(tmp_path):
    (tmp_path / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroups.limit_bytes(cgroups.Hierarchy(1, str(tmp_path)), str(tmp_path)) is None


def test_oom_kills_and_peaks_read_from_either_version(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (v1 / "memory.max_usage_in_bytes").write_text("1048576\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    assert cgroups.oom_kills(cgroups.Hierarchy(1, str(tmp_path)), str(v1)) == 3
    assert cgroups.oom_kills(cgroups.Hierarchy(2, str(tmp_path)), str(v2)) == 2
    assert cgroups.peak_bytes(cgroups.Hierarchy(1, str(tmp_path)), str(v1)) == 2**20
    assert cgroups.peak_bytes(cgroups.Hierarchy(2, str(tmp_path)), str(v2)) is None  # no memory.peak: unknown


def test_an_existing_group_is_a_name_collision(tmp_path):
    (tmp_path / "mailrail-x").mkdir()
    with pytest.raises(ClusterError, match="exists already"):
        cgroups.create(cgroups.Hierarchy(1, str(tmp_path)), str(tmp_path / "mailrail-x"), None)


def test_remove_takes_children_first_and_ignores_missing(tmp_path):
    group = tmp_path / "mailrail-x"
    (group / "n0").mkdir(parents=True)
    (group / "n1").mkdir()
    cgroups.remove(str(group))
    assert not group.exists()
    cgroups.remove(str(group))  # twice is fine
