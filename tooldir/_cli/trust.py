"""``tooldir allow | revoke | lock | keygen | sign | verify``: argument parsing and printing around
:mod:`tooldir.manage` (approve, revoke, lock, sign, explain) and :mod:`tooldir.trust.keys`.

Approvals, high-water marks and keys are user-side state; nothing here is read from a project
except the package being reviewed, and that is read through discovery (no symlinks, bounded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codes import DiagnosticCode
from .common import (
    EXIT_FOUND_ERRORS,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandError,
    common_options,
    config_from_args,
    console,
    policy_from_args,
    print_json,
    rule,
    safe,
    state_dir_from_args,
)
from .inspect import print_diagnostic_rows

if TYPE_CHECKING:
    from .. import manage
    from ..errors import PackageError
    from ..snapshot.loader import LoadConfig

#: The exit code of each PackageError reason.
_EXIT = {
    "not-found": EXIT_USAGE,
    "ambiguous": EXIT_USAGE,
    "rejected": EXIT_REFUSED,
    "changed": EXIT_REFUSED,
}


def _refused(exc: PackageError, args: argparse.Namespace, suffix: str = "") -> CommandError:
    if exc.found and not args.json:
        print_diagnostic_rows(exc.found)
    return CommandError(exc.message + suffix, _EXIT.get(exc.reason, EXIT_FOUND_ERRORS))


def register(sub: Any) -> None:
    parent = common_options()
    p = sub.add_parser("allow", parents=[parent], help="review a tool package and approve its exact content")
    p.add_argument("target", metavar="PATH|NAME", help="package folder, or a tool name in the configured roots")
    p.add_argument("--yes", action="store_true", help="approve without asking (after printing the review)")
    p.set_defaults(handler=cmd_allow)
    p = sub.add_parser("revoke", parents=[parent], help="withdraw approvals of a package path or tool name")
    p.add_argument("target", metavar="PATH|NAME")
    p.set_defaults(handler=cmd_revoke)
    p = sub.add_parser("lock", parents=[parent], help="write DIR/tool.lock listing the sha256 of every file")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--version", type=int, help="lock version (default: previous + 1 if files changed, else 1)")
    p.add_argument("--expires", metavar="ISO-DATE", help="expiry, e.g. 2027-01-31 or 2027-01-31T12:00:00Z")
    p.set_defaults(handler=cmd_lock)
    p = sub.add_parser("keygen", parents=[parent], help="create an unencrypted minisign key pair PATH and PATH.pub")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(handler=cmd_keygen)
    p = sub.add_parser("sign", parents=[parent], help="sign DIR/tool.lock with a minisign key (tool.lock.minisig)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--key", required=True, metavar="PATH", help="minisign secret key (tooldir keygen, minisign -G -W)")
    p.set_defaults(handler=cmd_sign)
    p = sub.add_parser("verify", parents=[parent], help="explain one package's trust verdict step by step")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(handler=cmd_verify)


# ---------------------------------------------------------------------------------------------
# allow / revoke


def cmd_allow(args: argparse.Namespace) -> int:
    from .. import manage
    from ..errors import PackageError

    config = config_from_args(args)
    try:
        verdict = manage.review(config, args.target)
    except PackageError as exc:
        raise _refused(exc, args, "; nothing approved" if exc.reason == "invalid" else "") from None
    manifest, digest = verdict.manifest, verdict.digest
    assert manifest is not None and digest is not None  # noqa: S101 -- review() checked
    if not args.json:
        _print_review(verdict)
    if not args.yes:
        if args.json or not sys.stdin.isatty():
            raise CommandError("not approved: review the package and re-run with --yes to record", EXIT_REFUSED)
        try:
            answer = input(f"Approve {manifest.name} with digest {digest}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            console().print("not approved")
            return EXIT_REFUSED
    try:
        approval = manage.approve(
            config, verdict.package.path, digest=digest, pin_upstream=False
        )  # pinned (and shown) below
    except PackageError as exc:
        raise _refused(exc, args) from None
    if not args.json:
        console().print(safe(f"approved {manifest.name} ({digest}) at {approval.path}", "green"))
    pins = None
    from ..model import ServerManifest

    if isinstance(manifest, ServerManifest):  # an MCP server: start it now, list and pin its tools
        from .upstream import pin_after_allow

        pins = pin_after_allow(config, approval.path, quiet=args.json)
    if args.json:
        print_json(
            {
                "approved": {"path": approval.path, **approval.to_json()},
                "manifest": manifest.model_dump(mode="json"),
                "diagnostics": [d.to_json() for d in verdict.diagnostics],
                **({"upstream": pins} if pins is not None else {}),
            }
        )
    return EXIT_FOUND_ERRORS if pins is not None and "error" in pins else EXIT_OK


def _print_review(verdict: manage.Verdict) -> None:
    from rich.table import Table

    out = console()
    manifest, package, key = verdict.manifest, verdict.package, verdict.key
    assert manifest is not None  # noqa: S101 -- checked by the caller
    rule(out, safe(f"review: {manifest.name} ({package.root.source})"))
    out.print(safe(f"path:   {verdict.path}"))
    out.print(safe(f"digest: {verdict.digest}"))
    out.print(safe(f"signed by: {key}" if key else "signed by: (not signed)"))
    out.print(safe(f"root:   {package.root.path} ({package.where})"))
    out.print("manifest (in full; the model will read the description):")
    out.print(safe(json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False)))
    table = Table("file", "bytes", "exec", "sha256", title="files that will be approved")
    for f in verdict.files:
        table.add_row(safe(f.path), str(f.size), "x" if f.executable else "", f.sha256)
    out.print(table)
    shown = tuple(d for d in verdict.diagnostics if d.code != DiagnosticCode.NOT_APPROVED)
    if shown:
        print_diagnostic_rows(shown)


def cmd_revoke(args: argparse.Namespace) -> int:
    from .. import manage

    removed = manage.revoke(config_from_args(args), args.target)
    if args.json:
        print_json({"revoked": [{"path": a.path, "name": a.name, "digest": a.digest} for a in removed]})
    elif removed:
        for a in removed:
            console().print(safe(f"revoked approval of {a.name} at {a.path} ({a.digest})"))
    else:
        console().print(safe(f"no approval recorded for {args.target}"))
    return EXIT_OK if removed else EXIT_FOUND_ERRORS


# ---------------------------------------------------------------------------------------------
# lock / keygen / sign


def _bare_config(args: argparse.Namespace) -> LoadConfig:
    """No roots: a package is judged by where its folder is."""
    from ..snapshot.loader import LoadConfig
    from ..state import default_state_dir

    state_dir = state_dir_from_args(args) or default_state_dir()
    return LoadConfig(roots=(), policy=policy_from_args(args), state_dir=state_dir)


def cmd_lock(args: argparse.Namespace) -> int:
    from .. import manage
    from ..errors import PackageError
    from ..trust.lockfile import format_time, parse_expiry

    expires = None
    if args.expires is not None:
        try:
            expires = parse_expiry(args.expires)
        except ValueError as exc:
            raise CommandError(f"--expires: {exc}") from None
    config = _bare_config(args)
    try:
        written = manage.lock(config, args.dir, version=args.version, expires=expires)
    except PackageError as exc:
        raise _refused(exc, args, "; fix the errors above" if exc.reason == "invalid" else "") from None
    except ValueError as exc:
        option = "--expires" if "expiry" in str(exc) else "--version"
        raise CommandError(f"{option}: {exc}") from None
    if args.json:
        print_json(
            {
                "lock": str(written.path),
                "name": written.name,
                "version": written.version,
                "expires": None if written.expires is None else format_time(written.expires),
                "files": list(written.files),
                "stale_signatures": list(written.stale_signatures),
                "approval_outdated": written.approval_outdated,
            }
        )
    else:
        console().print(
            safe(f"wrote {written.path}: {written.name} version {written.version}, {len(written.files)} files")
        )
        for s in written.stale_signatures:
            console().print(safe(f"warning: {s} signs the previous lock; sign again"), style="yellow")
        if written.approval_outdated:
            console().print(
                safe(
                    f"warning: {written.name} was approved without this lock; the lock is part of its content, so "
                    f"it is pending until you approve it again: tooldir allow {args.dir}"
                ),
                style="yellow",
            )
    return EXIT_OK


def _private_parent(path: Path) -> Path | None:
    """Create the missing folders above a key file, private (0700) like ~/.config; the highest one
    created, or None when the folder was there already."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
        except OSError as exc:
            raise CommandError(f"cannot create the folder {folder} for the key: {exc.strerror}") from None
    return missing[-1] if missing else None


def cmd_keygen(args: argparse.Namespace) -> int:
    from .._internal.atomic import write_atomic
    from ..trust.keys import generate_minisign_key

    secret_path, public_path = Path(args.path), Path(args.path + ".pub")
    if not args.force:
        for p in (secret_path, public_path):
            if p.exists() or p.is_symlink():
                raise CommandError(f"{p} exists; pass --force to overwrite it")
    created = _private_parent(secret_path)
    key, secret_text, public_text = generate_minisign_key()
    for path, text, mode in ((secret_path, secret_text, 0o600), (public_path, public_text, 0o644)):
        try:
            write_atomic(path, text.encode(), mode=mode, sync_dir=True)
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc.strerror}") from None
    line = public_text.splitlines()[1]
    key_id = key.public_key().id_hex
    if args.json:
        print_json({"secret_key": str(secret_path), "public_key": str(public_path), "key_id": key_id, "public": line})
    else:
        out = console()
        if created is not None:
            out.print(f"created the private folder {created} (mode 0700)", markup=False)
        out.print(f"secret key (unencrypted, mode 0600; keep it private): {secret_path}", markup=False)
        out.print(f"public key {key_id}: {public_path}", markup=False)
        out.print("trust it in your policy.toml:", markup=False)
        out.print(f'[keys]\nminisign = ["{line}"]', markup=False)
    return EXIT_OK


def cmd_sign(args: argparse.Namespace) -> int:
    from .. import manage
    from ..errors import PackageError

    try:
        written = manage.sign(_bare_config(args), args.dir, key=args.key)
    except PackageError as exc:
        raise _refused(exc, args, "; fix the errors above" if exc.reason == "invalid" else "") from None
    if args.json:
        print_json(
            {"signature": str(written.path), "key_id": written.key_id, "name": written.name, "version": written.version}
        )
    else:
        console().print(
            safe(f"wrote {written.path}: {written.name} version {written.version} signed by {written.key_id}")
        )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# verify


def cmd_verify(args: argparse.Namespace) -> int:
    from .. import manage
    from ..errors import PackageError
    from ..model import Status

    config = config_from_args(args)
    try:
        verdict = manage.explain(config, Path(args.dir))  # a path, never a tool name
    except PackageError as exc:
        raise _refused(exc, args) from None
    trust = verdict.trust
    if args.json:
        print_json(
            {
                "path": verdict.path,
                "name": verdict.tool,
                "source": str(verdict.package.root.source),
                "status": str(verdict.status),
                "trust": trust.method,
                "digest": verdict.digest,
                "signer": trust.signer,
                "version": trust.version,
                "steps": list(verdict.steps),
                "diagnostics": [d.to_json() for d in verdict.diagnostics],
            }
        )
    else:
        out = console()
        rule(out, safe(f"verify {verdict.path}"))
        marks = {True: ("ok", "green"), False: ("FAIL", "red"), None: ("--", "dim")}
        for number, step in enumerate(verdict.steps, start=1):
            word, style = marks[step["ok"]]  # type: ignore[index]
            line = safe(f"{number:2}. [{word}] {step['step']}: ", style)
            line.append_text(safe(str(step["detail"])))
            out.print(line)
        if verdict.diagnostics:
            print_diagnostic_rows(verdict.diagnostics)
        style = {Status.ACTIVE: "green", Status.PENDING: "yellow"}.get(verdict.status, "red")
        out.print(safe(f"verdict: {verdict.status} ({trust.method})", style))
    if verdict.status is Status.ACTIVE:
        return EXIT_OK
    return EXIT_REFUSED if verdict.status is Status.PENDING else EXIT_FOUND_ERRORS
