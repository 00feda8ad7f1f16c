"""Secrets are never written: credentials planted in a recorded incident (application logs, an
NCCL log's environment dump, the pod's env, a `--var`) reach no file of the run directory, no
report and no audit entry; the identity file's path may appear in what a failed SSH login says,
its key never does. The redactor itself never raises and is idempotent (property tests)."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.redact import REDACTED, RedactingFilter, redact, redact_data, redact_lines
from tests.tools import bundles

REPO = Path(__file__).resolve().parents[2]


def _b64url(data: dict[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


#: a Kubernetes service-account token's shape (header.payload.signature, base64url)
SA_JWT = ".".join(
    (
        _b64url({"alg": "RS256", "kid": "k8s-test-key-id"}),
        _b64url({"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:ml:trainer"}),
        "c2lnbmF0dXJlLW9mLWEtdGVzdC10b2tlbi1ub3QtcmVhbC0xMjM0NTY3ODkw",
    )
)
PEM_BODY = (
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n"
)
#: name -> (the line as it would appear in a log or env dump, the secret value in it)
SECRETS: dict[str, tuple[str, str]] = {
    "aws-secret-access-key": (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYzz7qTestOnly1",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYzz7qTestOnly1",
    ),
    "aws-access-key-id": ("aws_access_key_id = AKIAZQ3DTESTONLY7Q2L", "AKIAZQ3DTESTONLY7Q2L"),
    "hugging-face": (
        "HF_TOKEN=hf_qWeRtYuIoPaSdFgHjKlZxCvBnMtestonly42",
        "hf_qWeRtYuIoPaSdFgHjKlZxCvBnMtestonly42",
    ),
    "wandb": (
        "WANDB_API_KEY=5f1e0c3b9a8d7e6f5a4b3c2d1e0f9a8b7c6dfeed",
        "5f1e0c3b9a8d7e6f5a4b3c2d1e0f9a8b7c6dfeed",
    ),
    "bearer": (
        "curl -H 'Authorization: Bearer opaqueTokenForTestsOnly9Xq2Lm' https://api.example.com",
        "opaqueTokenForTestsOnly9Xq2Lm",
    ),
    "basic-auth": (
        "authorization: Basic dXNlcjpzZWNyZXRwYXNzd29yZA==",
        "dXNlcjpzZWNyZXRwYXNzd29yZA==",
    ),
    "password": ("db password=Tr0ub4dorHorseStaple9", "Tr0ub4dorHorseStaple9"),
    "github": (
        "GITHUB_TOKEN=ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    ),
    "github-pat": (
        "pushing with github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzTEST",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzTEST",
    ),
    "slack": (
        "SLACK_BOT=xoxb-2468013579-1357924680-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxb-2468013579-1357924680-AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    "slack-webhook": (
        "notify https://hooks.slack.com/services/T0TESTONLY/B0TESTONLY/abcdefGHIJKLmnopQRSTuvwx",
        "T0TESTONLY/B0TESTONLY/abcdefGHIJKLmnopQRSTuvwx",
    ),
    "service-account-jwt": (f"token read from /var/run/secrets: {SA_JWT}", SA_JWT),
    "url-credentials": (
        "cloning https://deploy:S3cr3tPa55wordTest@git.example.com/ml/repo.git",
        "S3cr3tPa55wordTest",
    ),
    "cli-flag": (
        "launcher --api-key ZmFrZS1hcGkta2V5LWZvci10ZXN0cw",
        "ZmFrZS1hcGkta2V5LWZvci10ZXN0cw",
    ),
    "pgpassword": ("PGPASSWORD=pgTestOnlyHunter2x psql -h db", "pgTestOnlyHunter2x"),
    "mysql-pwd": ("export MYSQL_PWD=myTestOnlyHunter3y", "myTestOnlyHunter3y"),
    "private-key": (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    ),
}
#: every secret value, and every line of the key's body on its own
NEEDLES = [value for _, value in SECRETS.values()] + PEM_BODY.split()
#: configuration that looks like a secret and is not: kept as it is
KEPT = (
    "NCCL_IB_HCA=mlx5_0,mlx5_1",
    "NCCL_SOCKET_IFNAME=eth0",
    "NCCL_DEBUG_SUBSYS=INIT,NET",
    "PWD=/workspace",
    "OLDPWD=/root",
    "PGPASSFILE=/home/trainer/.pgpass",
    "max_tokens=4096",
    "tokenizer=bpe",
)


def leaks(text: str) -> list[str]:
    return [needle for needle in NEEDLES if needle in text]


# -- the redactor, alone --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_secret_shape_is_redacted_and_what_surrounds_it_is_kept(name: str) -> None:
    line, value = SECRETS[name]
    out = redact(f"before {line} after\nnext line\n")
    assert value not in out
    assert REDACTED in out
    assert out.startswith("before ") and out.endswith("after\nnext line\n")


@pytest.mark.parametrize("line", KEPT)
def test_configuration_that_is_not_a_credential_is_kept(line: str) -> None:
    assert redact(line) == line


def test_a_variable_that_names_a_credential_keeps_its_name_and_loses_its_value() -> None:
    assert redact("export HF_TOKEN=hf_abcdefghijklmnopqrstu12") == "export HF_TOKEN=<REDACTED>"
    assert redact('{"DB_PASSWORD": "hunter2xyz"}') == '{"DB_PASSWORD": "<REDACTED>"}'


def test_a_kubernetes_env_entry_that_names_a_credential_is_redacted_in_text_and_data() -> None:
    text = '"env": [\n  {\n    "name": "DB_PASSWORD",\n    "value": "pgPassw0rdForTests"\n  }\n]'
    assert "pgPassw0rdForTests" not in redact(text)
    json.loads("{" + redact(text) + "}")  # still JSON
    data = {"env": [{"name": "DB_PASSWORD", "value": "pgPassw0rdForTests"}]}
    assert redact_data(data) == {"env": [{"name": "DB_PASSWORD", "value": REDACTED}]}


def test_a_private_key_inside_a_json_string_is_redacted_and_the_json_stays_valid() -> None:
    document = json.dumps({"key": SECRETS["private-key"][0] + "\n", "next": 1})
    redacted = redact(document)
    assert not leaks(redacted)
    assert json.loads(redacted)["key"].startswith("-----BEGIN RSA PRIVATE KEY-----\n<REDACTED>")


def test_a_private_key_cut_off_before_its_end_line_is_still_redacted() -> None:
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_BODY + "next log line: done\n"
    out = redact(cut)
    assert not leaks(out)
    assert out.endswith("next log line: done\n")


def test_a_large_file_is_redacted_block_by_block_without_splitting_a_key() -> None:
    filler = [f"NCCL INFO chatter line number {i}\n" for i in range(2000)]
    lines = [*filler, *SECRETS["private-key"][0].splitlines(keepends=True), "\n", *filler]
    from runbook import redact as secrets_mod

    original = secrets_mod.BLOCK_CHARS
    secrets_mod.BLOCK_CHARS = 1000  # many blocks, one key straddling a block boundary
    try:
        out = "".join(redact_lines(lines))
    finally:
        secrets_mod.BLOCK_CHARS = original
    assert not leaks(out)
    assert out.count("NCCL INFO chatter") == 4000


def test_a_secret_in_a_log_record_or_its_traceback_is_redacted() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.hardening.secrets")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("env: %s", SECRETS["hugging-face"][0])
        try:
            raise RuntimeError(SECRETS["aws-secret-access-key"][0])
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert records and not leaks("\n".join(records))
    assert "HF_TOKEN=<REDACTED>" in records[0]


# -- property tests ---------------------------------------------------------------------------

FRAGMENTS = [
    *(line for line, _ in SECRETS.values()),
    *KEPT,
    "password", "=", ":", " ", "\n", '"', "'", "\\n", "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----", "Bearer ", "Authorization: ", "https://u:", "@h/",
    "<REDACTED>", "hf_", "_KEY=", "token", "--password ", '"name": "X_TOKEN", "value": ',
]  # fmt: skip
texts = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(FRAGMENTS)), max_size=14).map(
    "".join
)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_redact_never_raises_and_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.one_of(texts, st.sampled_from(["password", "HF_TOKEN", "name"])), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(json_data)
def test_redact_data_never_raises_and_is_idempotent(data: object) -> None:
    once = redact_data(data)
    assert redact_data(once) == once


# -- end to end: a run, its reports and the audit trail ---------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RUNBOOK_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "COLUMNS": "200",
    }


def _runbook(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=REPO,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _plant(bundle: Path) -> None:
    """Every secret into an application log (an env dump), the NCCL log (as NCCL echoes its
    environment) and the pod's env."""
    dump = "".join(f"{line}\n" for line, _ in SECRETS.values())
    with (bundle / "app" / "rank-0.log").open("a") as handle:
        handle.write("environment at start:\n" + dump)
    nccl = next((bundle / "nccl").glob("*.log"))
    prefix = "gpu-node-07:48201:48201 [0] NCCL INFO "
    with nccl.open("a") as handle:
        handle.write(prefix + "NCCL_IB_HCA set by environment to mlx5_0\n")
        for line, _ in SECRETS.values():
            for part in line.splitlines():
                handle.write(prefix + "env " + part + "\n")
    pod = json.loads((bundle / "pod.json").read_text())
    pod["spec"]["containers"][0]["env"] = [
        {"name": "DB_PASSWORD", "value": "pgPassw0rdForTests"},
        {"name": "HF_TOKEN", "value": SECRETS["hugging-face"][1]},
        {"name": "NCCL_IB_HCA", "value": "mlx5_0"},
    ]
    (bundle / "pod.json").write_text(json.dumps(pod, indent=2))


def _all_text(root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path, path.read_bytes().decode("utf-8", errors="replace")


def test_secrets_planted_in_a_bundle_and_a_var_reach_no_run_directory_report_or_audit_entry(
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "incident"
    bundles.materialize("network-socket", bundle)
    _plant(bundle)
    NEEDLES.append("pgPassw0rdForTests")
    try:
        run_dir = tmp_path / "run"
        run = _runbook(
            tmp_path, "run", "nccl-init-failure", "--target", f"replay://{bundle}",
            "--run-dir", str(run_dir), "--no-input", "--format", "json",
            "--var", f"hf_token={SECRETS['hugging-face'][1]}",
            "--var", "password=Tr0ub4dorHorseStaple9",
            "--var", f"note={SECRETS['aws-secret-access-key'][0]}",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["root_cause"]  # whatever the planted IB setting makes it
        outputs = {"run stdout": run.stdout, "run stderr": run.stderr}
        for fmt in ("json", "markdown", "text"):
            analyzed = _runbook(tmp_path, "analyze", str(bundle), "--format", fmt)
            assert analyzed.returncode == 0, analyzed.stderr
            outputs[f"analyze --format {fmt}"] = analyzed.stdout + analyzed.stderr
        for args in (
            (str(run_dir),),
            (str(bundle), "--sanitize"),
            (str(run_dir), "--format", "json"),
        ):
            reported = _runbook(tmp_path, "report", *args)
            assert reported.returncode == 0, reported.stderr
            outputs["report " + " ".join(args)] = reported.stdout + reported.stderr

        found = {name: leaks(text) for name, text in outputs.items() if leaks(text)}
        written = dict(_all_text(run_dir))
        assert {"events.jsonl", "state.json", "verdict.json"} <= {p.name for p in written}
        assert any("bundle" in p.parts for p in written)
        audit = list((tmp_path / "state").rglob("audit*.jsonl"))
        assert audit, "the run queued proposals: the audit trail exists"
        written |= dict(_all_text(audit[0].parent)) if audit[0].parent.is_dir() else {}
        for path in audit:
            written[path] = path.read_text()
        found |= {str(p): leaks(t) for p, t in written.items() if leaks(t) and p.suffix != ".db"}
        assert not found, f"secrets written: {found}"
        # what was planted next to them survives, redacted in place
        nccl_copy = next((run_dir / "bundle" / "nccl").glob("*.log")).read_text()
        assert "NCCL_IB_HCA set by environment to mlx5_0" in nccl_copy
        assert "HF_TOKEN=<REDACTED>" in nccl_copy
        state = json.loads((run_dir / "state.json").read_text())
        assert "Tr0ub4dorHorseStaple9" not in json.dumps(state)
    finally:
        NEEDLES.remove("pgPassw0rdForTests")


def test_nothing_printed_carries_a_secret_not_a_finding_not_a_verbose_walk(
    tmp_path: Path,
) -> None:
    """The console gets what files get: a finding that quotes the failing request's
    `Authorization: Bearer …`, a `-v` walk that echoes each probe's output (an env dump with
    every shape), and an error that names a URL with a password are all redacted."""
    bundle = tmp_path / "incident"
    bundles.materialize("network-socket", bundle)
    _plant(bundle)
    bearer = SECRETS["bearer"][1]
    with (bundle / "app" / "rank-0.log").open("a") as handle:
        handle.write(f"RuntimeError: upload failed (Authorization: Bearer {bearer})\n")
    outputs = {}
    for fmt in ("text", "json"):
        walked = _runbook(
            tmp_path, "run", "nccl-init-failure", "--target", f"replay://{bundle}", "-v",
            "--run-dir", str(tmp_path / f"run-{fmt}"), "--no-input", "--format", fmt,
        )  # fmt: skip
        assert walked.returncode == 0, walked.stderr
        outputs[f"run -v --format {fmt}"] = walked.stdout + walked.stderr
    assert "Authorization: Bearer <REDACTED>" in outputs["run -v --format text"]
    password = SECRETS["url-credentials"][1]
    refused = _runbook(tmp_path, "run", "nccl-init-failure", "--target",
                       f"ssh://deploy:{password}@gpu-node-07", "--no-input")  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    outputs["error"] = refused.stdout + refused.stderr
    found = {name: leaks(text) for name, text in outputs.items() if leaks(text)}
    assert not found, f"secrets printed: {found}"


# -- the identity file: its path may appear, its key never ------------------------------------


class _RefuseEveryKey(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED


@pytest.fixture
def refusing_sshd() -> Iterator[tuple[int, paramiko.PKey]]:
    """An SSH server (paramiko, in a thread on 127.0.0.1) that refuses every key: the client
    has loaded and offered its identity by the time it is told no."""
    host_key = paramiko.RSAKey.generate(2048)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    stop = threading.Event()
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transports.append(transport)
            try:
                transport.start_server(server=_RefuseEveryKey())
            except (paramiko.SSHException, EOFError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], host_key
    finally:
        stop.set()
        for transport in transports:
            transport.close()
        listener.close()
        thread.join(5)


@pytest.mark.parametrize("kind", ["valid-key", "corrupt-key"])
def test_an_identity_file_path_may_be_named_but_its_key_is_never_written_or_logged(
    tmp_path: Path, refusing_sshd: tuple[int, paramiko.PKey], kind: str
) -> None:
    port, host_key = refusing_sshd
    identity = tmp_path / "id_rsa"
    if kind == "valid-key":
        paramiko.RSAKey.generate(2048).write_private_key_file(str(identity))
    else:  # a key file that does not parse: its text must not end up in an error message
        identity.write_text(
            f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----\n"
        )
    identity.chmod(0o600)
    body = [line for line in identity.read_text().splitlines() if "-----" not in line]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    run_dir = tmp_path / "run"
    result = _runbook(
        tmp_path, "--debug", "run", "nccl-init-failure",
        "--target", f"ssh://trainer@127.0.0.1:{port}", "--identity", str(identity),
        "--known-hosts", str(known_hosts), "--run-dir", str(run_dir), "--no-input",
        "--connect-timeout", "10",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr  # refused: authentication
    said = result.stdout + result.stderr
    assert said.strip().splitlines()[-1].startswith("runbook: ssh://trainer@127.0.0.1")
    written = "".join(text for _, text in _all_text(tmp_path / "state")) if (
        tmp_path / "state"
    ).exists() else ""  # fmt: skip
    if run_dir.exists():
        written += "".join(text for _, text in _all_text(run_dir))
    assert not [line for line in body if line in said or line in written]


def test_redact_data_treats_subclasses_and_other_containers_as_their_plain_kinds() -> None:
    """The exact-type fast path (dict, list, str, int) and the general path (an OrderedDict,
    a str subclass, a tuple) redact alike."""
    from collections import OrderedDict

    class Text(str):
        pass

    token = "hf_abcdefghijklmnopqrstu12"
    plain = {"HF_TOKEN": token, "note": f"export HF_TOKEN={token}", "PASSWORD": 1234,
             "ok": True, "n": None, "items": [f"token {token}", 5]}  # fmt: skip
    odd = OrderedDict(
        [("HF_TOKEN", Text(token)), ("note", Text(f"export HF_TOKEN={token}")),
         ("PASSWORD", 1234), ("ok", True), ("n", None), ("items", (Text(f"token {token}"), 5))]
    )  # fmt: skip
    a, b = redact_data(plain), redact_data(odd)
    assert a["HF_TOKEN"] == b["HF_TOKEN"] == REDACTED
    assert a["PASSWORD"] == b["PASSWORD"] == REDACTED
    assert a["note"] == b["note"] == "export HF_TOKEN=<REDACTED>"
    assert a["ok"] is b["ok"] is True and a["n"] is b["n"] is None
    assert a["items"] == [f"token {REDACTED}", 5] and b["items"] == (f"token {REDACTED}", 5)
    assert isinstance(b, dict) and isinstance(b["items"], tuple)
    assert redact_data({"PASSWORD": True}) == {"PASSWORD": True}  # a bool is no secret number
