"""Tuning on a fleet against a real PostgreSQL server (tests/pgserver.py starts one for this module,
never mocked): hosts are separate processes with their own caches and lock directories. Two hosts
share one study, a host killed mid-trial is reaped, a server restart is survived or reported in
one line, connection mistakes are one line, `pull` brings the winners home, and the password
shows up nowhere."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psycopg
import pytest
from optuna.trial import TrialState

from autotune.store.cache import Cache
from autotune.space.problem import Problem
from autotune.tune.fleet import WINNER, pull
from autotune.space.encoding import config_of, distributions, trial_params
from autotune.tune.storage import StorageError, heartbeat_settings, masked, open_storage, scrub, storage_errors
from autotune.tune.study import measured_trials, study_name
from kernels.base import Config
from pgserver import MissingServer, PgServer

TESTS = str(Path(__file__).parent)
SHAPE = (6, 5, 4)
FAST_HEARTBEAT = {"MMTUNE_HEARTBEAT_S": "1", "MMTUNE_GRACE_S": "3"}

#: a host that hangs in its first measurement, on a host name of its own (so no other host can
#: tell by process id that it died: only the heartbeat can)
HANGING_HOST = """
import socket, sys, time
socket.gethostname = lambda: "host-a"
from autotune.tune.tuner import TuneRequest, tune

def hang(kernel, shape, rng, warmup=3, repeat=20, lock=None):
    time.sleep(3600)

tune(TuneRequest(6, 5, 4, trials=6, families=["shared"], storage=sys.argv[1], jobs=1), hang, show_progress=False)
"""

#: a host whose measurements take a second each
SLOW_HOST = """
import sys, time
sys.path.insert(0, sys.argv[2])
from autotune.tune.replay import Replay, config_key
from autotune.space.configs import DeviceLimits, feasible_configs
from autotune.tune.tuner import TuneRequest, tune
replay = Replay({config_key("shared", c): 10.0 * c["tpb"] + c["pad"] for c in feasible_configs("shared", "float32", DeviceLimits())})

def slow(*args, **kwargs):
    time.sleep(1.0)
    return replay(*args, **kwargs)

tune(TuneRequest(6, 5, 4, trials=9, families=["shared"], storage=sys.argv[1], jobs=1), slow, show_progress=False)
"""


@pytest.fixture(scope="module")
def server():
    try:
        pg = PgServer()
    except MissingServer as error:
        pytest.fail(str(error))  # never skipped: the fleet promise must be tested
    pg.start()
    yield pg
    pg.stop()


@pytest.fixture(autouse=True)
def fast_heartbeat(monkeypatch):
    for name, value in FAST_HEARTBEAT.items():
        monkeypatch.setenv(name, value)


def host_env(cache: Path) -> dict:
    """A separate host: its own cache, and so its own lock directory and journal."""
    return {**os.environ, **FAST_HEARTBEAT, "MMTUNE_CACHE": str(cache)}


def tune_command(url: str, trials: int, jobs: int = 1) -> list[str]:
    m, n, k = map(str, SHAPE)
    return [sys.executable, "-m", "autotune", "tune", "--m", m, "--n", n, "--k", k, "--trials", str(trials),
            "--family", "shared", "--jobs", str(jobs), "--simulate", "--storage", url]


def load(url: str, shape=SHAPE) -> optuna.Study:
    return optuna.load_study(study_name=study_name(Problem("simulator", "float32", *shape, precision="ieee"), narrowed=True),
                             storage=open_storage(url, heartbeat=False))


def everything_stored(server: PgServer, database: str) -> str:
    """Every row of every table of the database, as text: to search for a leaked password."""
    with server.connect(database) as connection:
        tables = [r[0] for r in connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        return "\n".join(str(connection.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)


@pytest.fixture(scope="module")
def fleet(server, tmp_path_factory):
    """Two hosts tune one study together through the CLI, started at the same moment; the first
    with two worker processes, each opening the storage itself."""
    database = server.new_database()
    url = server.url(database)
    caches = [tmp_path_factory.mktemp(f"host{i}") / "cache.db" for i in range(2)]
    hosts = [subprocess.Popen(tune_command(url, 8, jobs), env=host_env(cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for jobs, cache in zip((2, 1), caches)]
    outputs = [host.communicate(timeout=300) for host in hosts]
    return {"database": database, "url": url, "caches": caches, "outputs": outputs,
            "codes": [host.returncode for host in hosts]}


def test_the_server_is_real_and_wants_the_password(server):
    with server.connect() as connection:
        assert "PostgreSQL" in connection.execute("SELECT version()").fetchone()[0]
        assert connection.execute("SHOW password_encryption").fetchone()[0] == "scram-sha-256"
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(host="127.0.0.1", port=server.port, user="mmtune", password="not-it", dbname="postgres")


def test_two_hosts_finish_one_study(fleet):
    for code, (out, err) in zip(fleet["codes"], fleet["outputs"]):
        assert code == 0, err[-2000:]
        assert "written to the cache" in out or "keeps a faster row" in out
    study = load(fleet["url"])
    measured = measured_trials(study)
    assert 8 <= len(measured) <= 10  # the study may end one trial per worker past T (3 workers)
    configs = [config_of(t.params) for t in measured]
    assert len(configs) - len(set(configs)) <= 2  # measured twice only while in flight elsewhere
    owners = {t.user_attrs["owner"].rpartition(":")[2] for t in measured}
    assert len(owners) >= 2  # more than one process measured
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    rows = [Cache(cache).get(Problem("simulator", "float32", *SHAPE)) for cache in fleet["caches"]]
    assert all(rows)
    winner = study.user_attrs[WINNER]
    assert winner["gflops"] == max(row.gflops for row in rows)


def test_the_password_shows_up_nowhere(fleet, server):
    password = server.password
    for out, err in fleet["outputs"]:
        assert password not in out + err
        assert f"in {masked(fleet['url'])}" in out.splitlines()[-1] and "***" in out.splitlines()[-1]
    assert password not in everything_stored(server, fleet["database"])  # study and trial attributes
    for cache in fleet["caches"]:
        for path in cache.parent.iterdir():  # the cache, its WAL, the lock files
            assert password.encode() not in path.read_bytes(), path


def test_pull_brings_the_winner_home(fleet, server, isolated_cache):
    done = subprocess.run([sys.executable, "-m", "autotune", "pull", "--storage", fleet["url"], "--device", "simulator"],
                          env=os.environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"pulled 1 studies of simulator from {masked(fleet['url'])}: 1 written, 0 kept "
                                   "(the cache's were current or faster), 0 without a verified trial")
    winner = load(fleet["url"]).user_attrs[WINNER]
    row = Cache().get(Problem("simulator", "float32", *SHAPE))
    assert (row.family, row.params, row.gflops) == (winner["family"], winner["params"], winner["gflops"])
    assert server.password not in isolated_cache.read_bytes().decode(errors="replace")

    again = pull(fleet["url"], "simulator")
    assert (again.studies, again.written, again.kept) == (1, 0, 1)
    assert pull(fleet["url"], "NVIDIA H200").studies == 0
    assert pull(fleet["url"], "simulator", "float64").studies == 0


def test_pull_takes_the_best_complete_trial_of_an_unfinished_study(server, isolated_cache):
    url = server.url(server.new_database())
    study = optuna.create_study(study_name=study_name(Problem("simulator", "float32", 3, 3, 3)), direction="maximize",
                                storage=open_storage(url, heartbeat=False))
    space = distributions(["shared"])
    for tpb, value in ((8, 5.0), (16, 7.0)):
        params = trial_params(Config.of("shared", {"tpb": tpb, "pad": 0}))
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions={name: space[name] for name in params}, value=value,
            user_attrs={"median_ms": 1.0, "spread": 0.01}))
    params = trial_params(Config.of("shared", {"tpb": 32, "pad": 0}))
    study.add_trial(optuna.trial.create_trial(  # failed: never pulled, whatever it says
        params=params, distributions={name: space[name] for name in params}, state=TrialState.FAIL))
    result = pull(url, "simulator")
    assert (result.studies, result.written) == (1, 1)
    row = Cache().get(Problem("simulator", "float32", 3, 3, 3))
    assert (row.params, row.gflops) == ({"tpb": 16, "pad": 0}, 7.0)


def test_a_host_killed_mid_trial_is_reaped_and_the_other_finishes(server, tmp_path):
    url = server.url(server.new_database())
    hanging = subprocess.Popen([sys.executable, "-c", HANGING_HOST, url], env=host_env(tmp_path / "a" / "cache.db"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _running_trials(url):
        assert hanging.poll() is None, hanging.stderr.read()
        assert time.monotonic() < deadline, "the hanging host never started a trial"
        time.sleep(0.3)
    other = subprocess.Popen([sys.executable, "-c", SLOW_HOST, url, TESTS], env=host_env(tmp_path / "b" / "cache.db"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not measured_trials(load(url)):  # both hosts are in the study now
        assert other.poll() is None, other.stderr.read()
        time.sleep(0.3)
    hanging.send_signal(signal.SIGKILL)
    hanging.wait()
    out, err = other.communicate(timeout=180)
    assert other.returncode == 0, err[-2000:]

    study = load(url)
    dead = [t for t in study.trials if t.user_attrs.get("owner", "").startswith("host-a:")]
    assert len(dead) == 1 and dead[0].state == TrialState.FAIL  # failed by the heartbeat reaper
    assert dead[0] not in measured_trials(study)  # no verdict on its config
    requeued = [t for t in study.trials if t.user_attrs.get("requeued_from") == dead[0].number]
    assert len(requeued) == 1 and requeued[0].state == TrialState.COMPLETE
    assert requeued[0].params == dead[0].params  # the other host measured the dead host's config
    assert len(measured_trials(study)) == 9  # every feasible config
    assert not study.get_trials(states=(TrialState.RUNNING,))


def _running_trials(url: str) -> list:
    try:
        return load(url).get_trials(states=(TrialState.RUNNING,))
    except KeyError:  # the study is not created yet
        return []


@pytest.mark.parametrize("outage", ["two seconds", "until the host gives up"])
def test_a_server_restart_mid_study_then_a_rerun_resumes(server, tmp_path, outage):
    url = server.url(server.new_database())
    env = host_env(tmp_path / "cache.db")
    host = subprocess.Popen(tune_command(url, 6), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        assert host.poll() is None and time.monotonic() < deadline, "the study ended before the restart"
        try:
            if len(measured_trials(load(url))) >= 2:
                break
        except KeyError:
            pass
        time.sleep(0.2)
    kept = {t.number for t in measured_trials(load(url))}
    server.halt()
    try:
        out, err = host.communicate(timeout=2 if outage == "two seconds" else 120)
    except subprocess.TimeoutExpired:  # still at work when the server came back
        out, err = None, None
    finally:
        server.resume()
    if out is None:
        out, err = host.communicate(timeout=300)
    assert server.password not in out + err
    if host.returncode != 0 or outage != "two seconds":  # it stopped: one line, no traceback
        assert host.returncode == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: study storage postgresql://mmtune:***@"), err
    rerun = subprocess.run(tune_command(url, 6), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "6 trials (" in rerun.stdout
    study = load(url)
    assert kept <= {t.number for t in measured_trials(study)}
    assert not study.get_trials(states=(TrialState.RUNNING,))


def _no_network() -> list[str]:
    """A prefix that runs a command in a network namespace of its own: a lookup of an unknown
    host there fails at once, and no query leaves this machine."""
    return ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]


@pytest.mark.parametrize("mistake", ["wrong password", "unknown host", "missing database", "pull, wrong password"])
def test_connection_mistakes_are_one_line(server, isolated_cache, mistake):
    database = server.new_database()
    url = server.url(database)
    prefix = []
    if "wrong password" in mistake:
        url = url.replace(server.password, "not-the-password")
    elif mistake == "unknown host":
        url = url.replace("127.0.0.1", "no-such-host.invalid")
        prefix = _no_network()
    else:
        url = url.replace(f"/{database}", "/no_such_database")
    command = [sys.executable, "-m", "autotune", "pull", "--storage", url, "--device", "simulator"]
    if not mistake.startswith("pull"):
        command = tune_command(url, 4)
    done = subprocess.run(prefix + command, env=os.environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: study storage postgresql://mmtune:***@"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert "not-the-password" not in done.stderr and server.password not in done.stderr
    assert Cache().rows() == []
    with server.connect(database) as connection:  # no tables, no study
        assert connection.execute("SELECT count(*) FROM information_schema.tables "
                                  "WHERE table_schema = 'public'").fetchone()[0] == 0


def test_the_password_may_come_from_the_environment_or_pgpass(server, tmp_path, monkeypatch):
    url = server.url(server.new_database(), password=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(StorageError, match="no password supplied"):
        open_storage(url)
    monkeypatch.setenv("PGPASSWORD", server.password)
    optuna.create_study(storage=open_storage(url))
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{server.port}:*:mmtune:{server.password}\n")
    pgpass.chmod(0o600)  # libpq ignores a .pgpass others can read
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert len(optuna.get_all_study_names(open_storage(url))) == 1


def test_masking():
    assert masked("postgresql://tuner:s3cr%40t@db.example:5432/fleet") == "postgresql://tuner:***@db.example:5432/fleet"
    assert masked("postgresql://tuner@db/fleet") == "postgresql://tuner@db/fleet"
    assert masked("/tmp/cache/studies.journal") == "/tmp/cache/studies.journal"
    url = "postgresql://tuner:hunter22@db/fleet"
    assert scrub(f"cannot reach {url}; hunter22 rejected", url) == "cannot reach postgresql://tuner:***@db/fleet; *** rejected"
    with pytest.raises(StorageError) as caught, storage_errors(url):
        raise optuna.exceptions.StorageInternalError("commit failed") from RuntimeError(f"lost {url}")
    assert "hunter22" not in str(caught.value) and str(caught.value).count("\n") == 0


def test_heartbeat_settings(monkeypatch):
    assert heartbeat_settings() == (1, 3)
    monkeypatch.setenv("MMTUNE_GRACE_S", "1")
    with pytest.raises(StorageError, match="must exceed"):
        heartbeat_settings()
    monkeypatch.setenv("MMTUNE_HEARTBEAT_S", "soon")
    with pytest.raises(StorageError, match="whole number"):
        heartbeat_settings()
