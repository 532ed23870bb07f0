"""The smallest change from a node's MIG state to the declared layout, and the refusals that protect jobs."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.mig import mig_plan, mig_profiles

PROFILES = mig_profiles.default_profiles()
H100 = PROFILES.sets["h100-80gb"]
H100_ID = "0x233010de"


def gpu(index=0, current=True, pending=None, instances=(), processes=(), device=H100_ID):
    """One GPU as mig_state.node_state returns it; instances: (gi id, profile, start, [compute sizes])."""
    gis = []
    for gi_id, profile, start, sizes in instances:
        cis = [{"id": n, "compute": size} for n, size in enumerate(sizes)]
        gis.append({"id": gi_id, "profile": profile, "start": start, "compute_instances": cis})
    return {
        "index": index,
        "uuid": "GPU-%d" % index,
        "product": "NVIDIA H100 80GB HBM3",
        "device_id": device,
        "mig": {"current": current, "pending": current if pending is None else pending},
        "gpu_instances": gis,
        "processes": list(processes),
    }


def entry(devices, **mig_devices):
    enabled = bool(mig_devices) or devices == "on"
    return {
        "devices": "all" if devices in ("all", "on", "off") else devices,
        "mig-enabled": enabled,
        **({"mig-devices": {k.replace("_", "."): v for k, v in mig_devices.items()}} if enabled else {}),
    }


def plan(gpus, entries):
    return mig_plan.plan({"gpus": gpus}, entries, H100, PROFILES.compute_instances)


SEVEN = entry("all", **{"1g_10gb": 7})


def test_enable_and_create_on_a_fresh_gpu():
    result = plan([gpu(current=False)], [SEVEN])
    (one,) = result["gpus"]
    assert (one["set_mode"], one["reset"], one["destroy"]) == (True, True, [])
    assert [c["profile"] for c in one["create"]] == ["1g.10gb"] * 7
    assert one["create"][0] == {
        "profile": "1g.10gb",
        "profile_id": 19,
        "compute_instances": [{"compute": 1, "profile_id": 0}],
        "default_compute_instance": True,
    }
    assert (result["changed"], result["reset"], result["refused"], result["untouched"]) == (True, [0], [], [])


def test_a_pending_mode_needs_only_the_reset():
    (one,) = plan([gpu(current=False, pending=True)], [SEVEN])["gpus"]
    assert (one["set_mode"], one["reset"]) == (None, True)


def test_nothing_to_do_when_the_layout_is_there():
    current = [(n + 7, "1g.10gb", n, [1]) for n in range(7)]
    result = plan([gpu(instances=current)], [SEVEN])
    assert result["changed"] is False
    assert result["untouched"] == [0]


def test_kept_instances_stay_and_only_the_difference_changes():
    # 3g.40gb at 4 stays; the four 1g.10gb at 0-3 go; two 2g.20gb fit at 0 and 2.
    current = [(1, "3g.40gb", 4, [3])] + [(n + 2, "1g.10gb", n, [1]) for n in range(4)]
    (one,) = plan([gpu(instances=current)], [entry("all", **{"3g_40gb": 1, "2g_20gb": 2})])["gpus"]
    assert [d["gpu_instance"] for d in one["destroy"]] == [2, 3, 4, 5]
    assert [c["profile"] for c in one["create"]] == ["2g.20gb", "2g.20gb"]
    assert (one["set_mode"], one["reset"]) == (None, False)


def test_fragmentation_falls_back_to_recreating_everything():
    # 3g.40gb at 0 leaves only start 4 for a 2g.20gb: two do not fit beside it, so all is rebuilt.
    current = [(1, "3g.40gb", 0, [3])] + [(n + 2, "1g.10gb", n, [1]) for n in (4, 5, 6)]
    (one,) = plan([gpu(instances=current)], [entry("all", **{"3g_40gb": 1, "2g_20gb": 2})])["gpus"]
    assert [d["gpu_instance"] for d in one["destroy"]] == [1, 6, 7, 8]
    assert [c["profile"] for c in one["create"]] == ["3g.40gb", "2g.20gb", "2g.20gb"]  # largest first


def test_missing_compute_instances_are_added_to_the_kept_gpu_instance():
    current = [(1, "3g.40gb", 0, [1])]
    (one,) = plan([gpu(instances=current)], [entry("all", **{"1c_3g_40gb": 3})])["gpus"]
    assert one["destroy"] == []
    assert one["create"] == []
    assert one["grow"] == [
        {
            "gpu_instance": 1,
            "profile": "3g.40gb",
            "compute_instances": [{"compute": 1, "profile_id": 0}, {"compute": 1, "profile_id": 0}],
        }
    ]


def test_a_wider_compute_instance_beside_existing_ones_rebuilds_the_gpu_instance():
    # 1c at slice 1 of a 3g.40gb would leave no start 0 for a 2c: the GPU instance is rebuilt instead.
    current = [(1, "3g.40gb", 0, [1])]
    (one,) = plan([gpu(instances=current)], [entry("all", **{"2c_3g_40gb": 1, "1c_3g_40gb": 1})])["gpus"]
    assert [d["gpu_instance"] for d in one["destroy"]] == [1]
    assert one["grow"] == []
    assert one["create"][0]["compute_instances"] == [{"compute": 2, "profile_id": 1}, {"compute": 1, "profile_id": 0}]
    # a GPU instance without compute instances (created without -C) gets them, whatever their size
    (bare,) = plan([gpu(instances=[(1, "3g.40gb", 0, [])])], [entry("all", **{"2c_3g_40gb": 1, "1c_3g_40gb": 1})])[
        "gpus"
    ]
    assert [g["gpu_instance"] for g in bare["grow"]] == [1]
    assert bare["destroy"] == []


def test_turning_mig_off_destroys_instances_first():
    (one,) = plan([gpu(instances=[(1, "7g.80gb", 0, [7])])], [entry("off")])["gpus"]
    assert one["destroy"] == [{"gpu_instance": 1, "profile": "7g.80gb", "compute_instances": [0]}]
    assert (one["set_mode"], one["reset"]) == (False, True)


def test_a_reset_under_a_job_is_refused_with_its_processes_named():
    job = {"pid": 818, "name": "python3", "gpu_instance_id": None}
    result = plan([gpu(current=False, processes=[job])], [SEVEN])
    assert result["refused"] == [
        "GPU 0 (NVIDIA H100 80GB HBM3) needs a reset for the MIG mode change and runs python3 (pid 818)"
    ]


def test_processes_block_only_the_gpu_instances_they_run_in():
    current = [(1, "3g.40gb", 4, [3])] + [(n + 2, "1g.10gb", n, [1]) for n in range(4)]
    layout = [entry("all", **{"3g_40gb": 1, "2g_20gb": 2})]
    in_kept = {"pid": 7, "name": "vllm", "gpu_instance_id": 1}
    assert plan([gpu(instances=current, processes=[in_kept])], layout)["refused"] == []
    in_destroyed = {"pid": 9, "name": "triton", "gpu_instance_id": 3}
    (refusal,) = plan([gpu(instances=current, processes=[in_kept, in_destroyed])], layout)["refused"]
    assert refusal == "GPU 0 (NVIDIA H100 80GB HBM3): GPU instance(s) 2, 3, 4, 5 to be destroyed run triton (pid 9)"


def test_entries_match_by_index_and_filter_and_the_last_match_wins():
    entries = [
        entry("all", **{"7g_80gb": 1}),
        {"devices": [1], "mig-enabled": False},
        {"device-filter": "0x233510DE", "devices": [2], "mig-enabled": False},
    ]
    result = plan([gpu(0, current=False), gpu(1, current=False), gpu(2, current=False)], entries)
    assert [g["untouched"] for g in result["gpus"]] == [False, True, False]
    assert result["gpus"][2]["create"][0]["profile"] == "7g.80gb"  # the H200 filter does not match an H100
    assert mig_plan.entry_for(entries, 5, H100_ID) is entries[0]
    assert mig_plan.entry_for([entries[2]], 2, H100_ID) is None


def test_a_gpu_without_mig_is_refused_when_the_layout_enables_it():
    (refusal,) = plan([gpu(current=None, device="0x26b910de")], [entry("on")])["refused"]
    assert refusal.startswith("GPU 0 (NVIDIA H100 80GB HBM3) has no MIG mode")
    assert plan([gpu(current=None)], [entry("off")])["changed"] is False
