"""infiniband.read_ports on captured sysfs trees."""

from ansible_collections.gpuops.cluster.plugins.module_utils.health import infiniband

from .conftest import FIXTURES


def test_healthy_tree():
    parsed = infiniband.read_ports(str(FIXTURES / "infiniband" / "healthy-8x-ndr"))
    assert parsed["warnings"] == []
    assert [port["name"] for port in parsed["ports"]][:3] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1"]
    port = parsed["ports"][0]
    assert (port["state"], port["state_code"], port["phys_state"], port["rate_gbps"]) == ("ACTIVE", 4, "LinkUp", 400.0)
    assert port["link_layer"] == "InfiniBand"
    assert port["counters"]["symbol_error"] == 0
    assert "port_rcv_data" not in port["counters"]  # traffic, not errors
    assert parsed["ports"][-1]["link_layer"] == "Ethernet"


def test_degraded_tree():
    ports = {p["name"]: p for p in infiniband.read_ports(str(FIXTURES / "infiniband" / "degraded-8x-ndr"))["ports"]}
    assert (ports["mlx5_3:1"]["state"], ports["mlx5_3:1"]["phys_state"]) == ("DOWN", "Polling")
    assert ports["mlx5_5:1"]["rate_gbps"] == 200.0
    assert ports["mlx5_5:1"]["counters"]["link_downed"] == 2


def test_no_infiniband(tmp_path):
    assert infiniband.read_ports(str(tmp_path)) == {"ports": [], "warnings": []}


def test_unreadable_values_are_warnings(tmp_path):
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "symbol_error").write_text("lots\n")
    parsed = infiniband.read_ports(str(tmp_path))
    assert parsed["ports"][0]["state"] is None
    assert len(parsed["warnings"]) == 2
