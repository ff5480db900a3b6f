"""compose.yaml, the Dockerfiles and examples/monitoring hold together: every long-running
service has a healthcheck, Prometheus scrapes the ports the services serve on and loads the
rules it is given, every file a Dockerfile copies exists, and the sweeper's heartbeat (what
its healthcheck reads) is touched by a real sweeper on a real database.

(``docker compose config`` needs the compose plugin, which CI machines do not have; the
healthcheck commands themselves were run by hand against a real worker and sweeper.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from workers.sweeper import Sweeper

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "examples" / "monitoring"


def _compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_every_long_running_service_has_a_healthcheck() -> None:
    services = _compose()["services"]
    for name in ("worker", "sweeper", "projector", "postgres", "redis", "prometheus"):
        check = services[name].get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
    # the worker pings its own Celery node; the sweeper reads the heartbeat it writes
    assert "inspect ping" in services["worker"]["healthcheck"]["test"][1]
    heartbeat = _flag(services["sweeper"]["command"], "--heartbeat-file")
    assert heartbeat in " ".join(services["sweeper"]["healthcheck"]["test"])
    port = _flag(services["projector"]["command"], "--metrics-port")
    assert f":{port}/metrics" in " ".join(services["projector"]["healthcheck"]["test"])


def test_prometheus_scrapes_the_ports_the_services_serve_and_loads_its_rules() -> None:
    services = _compose()["services"]
    prometheus = services["prometheus"]
    mounts = dict(volume.removesuffix(":ro").split(":", 1) for volume in prometheus["volumes"])
    for source in mounts:
        if source.startswith("./"):  # a file of this repository (else a named volume)
            assert (ROOT / source).is_file(), source
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert config["rule_files"] == [mounts["./examples/monitoring/sagafleet-alerts.yaml"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    projector_port = _flag(services["projector"]["command"], "--metrics-port")
    assert jobs["sagafleet-projector"]["static_configs"][0]["targets"] == [
        f"projector:{projector_port}"]
    workers = jobs["sagafleet-workers"]["dns_sd_configs"][0]
    assert workers["names"] == ["worker"]
    assert str(workers["port"]) == _flag(services["worker"]["command"], "--metrics-port")


def test_prometheus_scrapes_with_the_token_of_a_fleet_operator_the_compose_file_issues() -> None:
    # the metrics endpoints are every tenant's: they answer only to the fleet role's token
    services = _compose()["services"]
    issuing = services["metrics-token"]
    script = issuing["command"][-1]
    assert "--role fleet_operator" in script and "--save-token /tmp/prometheus.token" in script
    (volume,) = [v for v in issuing["volumes"] if v.endswith(":/tmp")]
    shared = volume.split(":", 1)[0]
    assert shared in _compose()["volumes"]
    mounted = {v.split(":")[0]: v.split(":")[1] for v in services["prometheus"]["volumes"]}
    token_file = f"{mounted[shared]}/prometheus.token"
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        assert job["authorization"] == {"credentials_file": token_file}, job["job_name"]


def test_the_alert_rules_are_well_formed_and_cover_the_four_business_alerts() -> None:
    rules = yaml.safe_load((MONITORING / "sagafleet-alerts.yaml").read_text())
    business = next(g for g in rules["groups"] if g["name"] == "sagafleet-business")
    kinds = {re.search(r'kind="(\w+)"', rule["expr"]).group(1) for rule in business["rules"]}
    assert kinds == {"captured_without_confirmation", "compensation_failing",
                     "executed_before_approval", "unresolved_ambiguous_outcomes"}
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
            assert rule["labels"]["severity"] in ("critical", "warning", "info")


def test_every_file_a_dockerfile_copies_exists() -> None:
    for dockerfile in (ROOT / "Dockerfile", ROOT / "examples" / "custom_tools" / "Dockerfile"):
        for line in dockerfile.read_text().replace("\\\n", " ").splitlines():
            words = line.split()
            if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
                continue
            for source in words[1:-1]:
                assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}"


def test_a_sweeper_touches_its_heartbeat_after_every_pass(fleet, tmp_path) -> None:
    # given a sweeper on a real database, told to keep a heartbeat file
    heartbeat = tmp_path / "sweeper.alive"
    # when it runs a few passes
    Sweeper(fleet).run_forever(0.05, stop_after=0.5, heartbeat=heartbeat)
    # then the file is there (a healthcheck reads its age)
    assert heartbeat.is_file()


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None,
                    reason="promtool not installed (Debian: apt install prometheus)")
def test_promtool_accepts_the_config_and_the_rules_fire_as_their_tests_expect(tmp_path) -> None:
    assert PROMTOOL is not None
    # given the config as compose mounts it (the rules next to it, and the token the
    # metrics-token service saves)
    token = tmp_path / "prometheus.token"
    token.write_text("sft_" + "x" * 43 + "\n")
    config = (MONITORING / "prometheus.yml").read_text().replace(
        "/etc/prometheus/sagafleet-alerts.yaml", str(MONITORING / "sagafleet-alerts.yaml")
    ).replace("/etc/prometheus/sagafleet/prometheus.token", str(token))
    (tmp_path / "prometheus.yml").write_text(config)
    # then promtool accepts it, and every alert fires (and stays quiet) as its test says
    for args in (["check", "config", str(tmp_path / "prometheus.yml")],
                 ["test", "rules", "sagafleet-alerts.test.yaml"]):
        done = subprocess.run([PROMTOOL, *args], cwd=MONITORING, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
