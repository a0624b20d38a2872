"""An MCP server package that declares secrets is never started (issue 24 item 4: secrets reach
directory tools only in this version; a server is refused whole, never run half-configured)."""

from __future__ import annotations

from pathlib import Path

from harness import rig, server_policy
from servertools import make_server

from tooldir.policy import SecretsPolicy
from tooldir.run.secrets import default_secrets_path


def test_a_server_package_declaring_secrets_is_not_started_and_says_why(tmp_path: Path, root: Path) -> None:
    canary = tmp_path / "started"
    spec = {"command": ["python3", "server.py"], "network": False, "env": [], "timeout_s": 20, "secrets": ["VAULT"]}
    make_server(root, "vault", canary=canary, server=spec)
    default_secrets_path().parent.mkdir(parents=True)
    default_secrets_path().write_text('[secrets]\nVAULT = "vault-value-123"\n')
    default_secrets_path().chmod(0o600)
    policy = server_policy().model_copy(update={"secrets": SecretsPolicy(grants={"vault": ("VAULT",)})})
    with rig(root, tmp_path / "state", policy) as r:
        _, problems = r.hub.refresh(r.base)
        assert not any(name.startswith("vault__") for name in r.snapshot.by_name)
    messages = " ".join(p.message for p in problems)
    assert "declares secrets (VAULT)" in messages and "not started" in messages
    assert not canary.exists()
    assert b"vault-value-123" not in b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file())
