"""``tooldir allow | revoke | lock | keygen | sign | verify``: approving and signing tool packages.

Approvals, high-water marks and keys are user-side state; nothing here is read from a project
except the package being reviewed, and that is read through discovery (no symlinks, bounded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from .._internal.atomic import write_atomic
from ..discover import RootSpec, scan_one
from ..errors import DiscoveryError
from ..keys import generate_minisign_key, minisign_sign, parse_minisign_secret_key
from ..loader import LoadConfig, project_root, read_keyring
from ..lockfile import LOCK, MINISIG, LockError, compare_files, format_time, parse_expiry, parse_lock, render_lock
from ..model import Diagnostic, Severity, Source, Status
from ..policy import Policy
from ..signatures import SignatureFormatError
from ..state import (
    Approval,
    default_state_dir,
    load_approvals,
    load_high_water,
    record_approval,
    record_versions,
    remove_approvals,
)
from ..trust import Assessment, SignatureVerdict, TrustInputs, assess, verify_package
from ..validate import Candidate, validate_package
from .common import (
    EXIT_FOUND_ERRORS,
    EXIT_OK,
    EXIT_REFUSED,
    CommandError,
    common_options,
    config_from_args,
    console,
    policy_from_args,
    print_json,
    safe,
    state_dir_from_args,
)
from .inspect import print_diagnostic_rows


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
# locating and reading one package


@dataclass(frozen=True, slots=True)
class Package:
    root: RootSpec
    name: str
    path: str
    where: str  # how the root was found, for people


def _locate_path(target: str, config: LoadConfig, *, must_exist: bool = True) -> Package:
    if must_exist and not os.path.lexists(target):
        raise CommandError(f"{target}: no such tool folder")
    absolute = os.path.abspath(target)
    parent, name = os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute)
    for root in config.roots:
        if root.path == parent:
            return Package(root, name, os.path.join(root.path, name), "a configured root")
    parts = Path(parent).parts
    if len(parts) >= 3 and parts[-2:] == (".tooldir", "tools"):
        root = project_root(Path(parent).parent.parent)
        return Package(root, name, os.path.join(root.path, name), f"the project root of {root.anchor}")
    root = RootSpec(Source.PROJECT, parent)
    return Package(root, name, os.path.join(parent, name), "outside every tool root (judged as a project tool)")


def _locate(target: str, config: LoadConfig) -> Package:
    """A package by path, or by tool name (= folder name) in the configured roots."""
    if os.sep in target or target in (".", "..") or os.path.isdir(target):
        return _locate_path(target, config)
    found = [Package(r, target, os.path.join(r.path, target), "a configured root") for r in config.roots]
    found = [p for p in found if os.path.isdir(p.path)]
    if not found:
        raise CommandError(f"no tool folder named {target!r} in {', '.join(r.path for r in config.roots)}")
    if len(found) > 1:
        raise CommandError(f"{target!r} exists in several roots; pass the path: {', '.join(p.path for p in found)}")
    return found[0]


def _read(package: Package, policy: Policy) -> Candidate:
    if not os.path.isdir(package.path) and not os.path.islink(package.path):
        raise CommandError(f"{package.path} is not a tool folder", EXIT_FOUND_ERRORS)
    try:
        return validate_package(scan_one(package.root, package.name, policy.limits), policy)
    except DiscoveryError as exc:
        raise CommandError(exc.message, EXIT_FOUND_ERRORS) from None


@dataclass(frozen=True, slots=True)
class Judgement:
    candidate: Candidate
    verdict: SignatureVerdict | None
    assessment: Assessment


def _judge(candidate: Candidate, config: LoadConfig, now: datetime) -> Judgement:
    keyring = read_keyring(config.policy)
    marks = load_high_water(config.state_dir)
    verdict = verify_package(candidate, keyring=keyring, marks=marks, now=now, explain=True)
    inputs = TrustInputs(config.policy, load_approvals(config.state_dir), now, lambda _c: verdict)
    return Judgement(candidate, verdict, assess(candidate, inputs))


def _now() -> datetime:
    return datetime.now(UTC)


def _errors(diags: tuple[Diagnostic, ...]) -> bool:
    return any(d.severity is Severity.ERROR for d in diags)


# ---------------------------------------------------------------------------------------------
# allow / revoke


def cmd_allow(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    package = _locate(args.target, config)
    now = _now()
    judged = _judge(_read(package, config.policy), config, now)
    candidate, assessment = judged.candidate, judged.assessment
    scan, manifest = candidate.scan, candidate.manifest
    if manifest is None or scan.digest is None or not candidate.valid:
        if not args.json:
            print_diagnostic_rows(candidate.diagnostics or scan.diagnostics)
        raise CommandError(f"{package.path} is not a valid tool package; nothing approved", EXIT_FOUND_ERRORS)
    if assessment.status is Status.REJECTED:
        if not args.json:
            print_diagnostic_rows(assessment.diagnostics)
        codes = ", ".join(sorted({d.code for d in assessment.diagnostics})) or "rejected"
        raise CommandError(f"{manifest.name} is rejected ({codes}); an approval cannot override that", EXIT_REFUSED)
    key = judged.verdict.key if judged.verdict else None
    approval = Approval(
        path=scan.path,
        name=manifest.name,
        digest=scan.digest,
        time=format_time(now),
        key=key,
        files=tuple((f.path, f.sha256) for f in scan.files),
    )
    if not args.json:
        _print_review(candidate, package, key, (*candidate.diagnostics, *assessment.diagnostics))
    if not args.yes:
        if args.json or not sys.stdin.isatty():
            raise CommandError("not approved: review the package and re-run with --yes to record", EXIT_REFUSED)
        try:
            answer = input(f"Approve {manifest.name} with digest {scan.digest}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            console().print("not approved")
            return EXIT_REFUSED
    record_approval(config.state_dir, approval)
    if args.json:
        print_json(
            {
                "approved": {"path": approval.path, **approval.to_json()},
                "manifest": manifest.model_dump(mode="json"),
                "diagnostics": [d.to_json() for d in (*candidate.diagnostics, *assessment.diagnostics)],
            }
        )
    else:
        console().print(safe(f"approved {manifest.name} ({scan.digest}) at {approval.path}", "green"))
    return EXIT_OK


def _print_review(candidate: Candidate, package: Package, key: str | None, diags: tuple[Diagnostic, ...]) -> None:
    out = console()
    scan, manifest = candidate.scan, candidate.manifest
    assert manifest is not None  # noqa: S101 -- checked by the caller
    out.rule(safe(f"review: {manifest.name} ({package.root.source})"))
    out.print(safe(f"path:   {scan.path}"))
    out.print(safe(f"digest: {scan.digest}"))
    out.print(safe(f"signed by: {key}" if key else "signed by: (not signed)"))
    out.print(safe(f"root:   {package.root.path} ({package.where})"))
    out.print("manifest (in full; the model will read the description):")
    out.print(safe(json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False)))
    table = Table("file", "bytes", "exec", "sha256", title="files that will be approved")
    for f in scan.files:
        table.add_row(safe(f.path), str(f.size), "x" if f.executable else "", f.sha256)
    out.print(table)
    shown = tuple(d for d in diags if d.code != "not-approved")
    if shown:
        print_diagnostic_rows(shown)


def cmd_revoke(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    approvals = load_approvals(config.state_dir)
    if os.sep in args.target or os.path.isdir(args.target):
        paths = [_locate_path(args.target, config, must_exist=False).path]
    else:
        paths = [p for p, a in approvals.items() if a.name == args.target]
    removed = remove_approvals(config.state_dir, paths)
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


def _valid_package(args: argparse.Namespace, policy: Policy) -> tuple[Candidate, str]:
    package = _locate_path(args.dir, _bare_config(args, policy))
    candidate = _read(package, policy)
    if candidate.manifest is None or not candidate.valid:
        if not args.json:
            print_diagnostic_rows(candidate.diagnostics)
        raise CommandError(f"{package.path} is not a valid tool package; fix the errors above", EXIT_FOUND_ERRORS)
    return candidate, candidate.manifest.name


def _bare_config(args: argparse.Namespace, policy: Policy) -> LoadConfig:
    return LoadConfig(roots=(), policy=policy, state_dir=state_dir_from_args(args) or default_state_dir())


def cmd_lock(args: argparse.Namespace) -> int:
    policy = policy_from_args(args)
    candidate, name = _valid_package(args, policy)
    expires = None
    if args.expires is not None:
        try:
            expires = parse_expiry(args.expires)
        except ValueError as exc:
            raise CommandError(f"--expires: {exc}") from None
        if expires <= _now():
            raise CommandError(f"--expires {args.expires} is in the past")
    previous = None
    if LOCK in candidate.scan.contents:
        try:
            previous = parse_lock(candidate.scan.contents[LOCK])
        except LockError:
            previous = None
    version = args.version
    if version is None:
        if previous is None:
            version = 1
        else:
            same = compare_files(previous, candidate.scan.files).clean and previous.name == name
            version = previous.version if same else previous.version + 1
    if version < 0:
        raise CommandError("--version must be a non-negative integer")
    data = render_lock(name, version, expires, candidate.scan.files)
    target = Path(candidate.scan.path) / LOCK
    write_atomic(target, data, mode=0o644, sync_dir=True)
    stale = [s for s in ("tool.lock.minisig", "tool.lock.sig") if s in candidate.scan.contents]
    files = [f.path for f in candidate.scan.files if f.path not in (LOCK, *stale)]
    if args.json:
        print_json(
            {
                "lock": str(target),
                "name": name,
                "version": version,
                "expires": None if expires is None else format_time(expires),
                "files": files,
                "stale_signatures": stale,
            }
        )
    else:
        console().print(safe(f"wrote {target}: {name} version {version}, {len(files)} files"))
        for s in stale:
            console().print(safe(f"warning: {s} signs the previous lock; sign again"), style="yellow")
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    secret_path, public_path = Path(args.path), Path(args.path + ".pub")
    if not args.force:
        for p in (secret_path, public_path):
            if p.exists() or p.is_symlink():
                raise CommandError(f"{p} exists; pass --force to overwrite it")
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
        out.print(f"secret key (unencrypted, mode 0600; keep it private): {secret_path}", markup=False)
        out.print(f"public key {key_id}: {public_path}", markup=False)
        out.print("trust it in your policy.toml:", markup=False)
        out.print(f'[keys]\nminisign = ["{line}"]', markup=False)
    return EXIT_OK


def cmd_sign(args: argparse.Namespace) -> int:
    try:
        key = parse_minisign_secret_key(Path(args.key).read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"--key {args.key}: cannot read: {exc}") from None
    except SignatureFormatError as exc:
        raise CommandError(f"--key {args.key}: {exc}") from None
    candidate, name = _valid_package(args, policy_from_args(args))
    lock_bytes = candidate.scan.contents.get(LOCK)
    if lock_bytes is None:
        raise CommandError(f"no {LOCK} in {candidate.scan.path}; run 'tooldir lock' first", EXIT_FOUND_ERRORS)
    try:
        lock = parse_lock(lock_bytes)
    except LockError as exc:
        raise CommandError(f"{LOCK} at {exc.pointer or '/'}: {exc.message}", EXIT_FOUND_ERRORS) from None
    mismatch = compare_files(lock, candidate.scan.files)
    if lock.name != name or not mismatch.clean:
        detail = f"names {lock.name!r}" if lock.name != name else _describe(mismatch)
        raise CommandError(f"{LOCK} is stale ({detail}); run 'tooldir lock' again", EXIT_FOUND_ERRORS)
    now = _now()
    comment = f"timestamp:{int(now.timestamp())}\tfile:{LOCK}\thashed\ttool:{lock.name}\tversion:{lock.version}"
    target = Path(candidate.scan.path) / MINISIG
    write_atomic(target, minisign_sign(key, lock_bytes, comment), mode=0o644, sync_dir=True)
    key_id = key.public_key().id_hex
    if args.json:
        print_json({"signature": str(target), "key_id": key_id, "name": lock.name, "version": lock.version})
    else:
        console().print(safe(f"wrote {target}: {lock.name} version {lock.version} signed by {key_id}"))
    return EXIT_OK


def _describe(mismatch: Any) -> str:
    parts = []
    for label, paths in (("unlisted", mismatch.unlisted), ("missing", mismatch.missing), ("changed", mismatch.changed)):
        if paths:
            parts.append(f"{label}: {', '.join(paths)}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# verify


def cmd_verify(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    package = _locate_path(args.dir, config)
    now = _now()
    judged = _judge(_read(package, config.policy), config, now)
    candidate, verdict, assessment = judged.candidate, judged.verdict, judged.assessment
    steps = _explain(package, judged, config.policy)
    if verdict is not None and verdict.trusted and verdict.signer and verdict.version is not None:
        record_versions(
            config.state_dir,
            [
                (signer, candidate.manifest.name if candidate.manifest else package.name, verdict.version)
                for signer in dict.fromkeys((verdict.signer, *verdict.signers))
            ],
        )
    diags = (*candidate.diagnostics, *assessment.diagnostics)
    if args.json:
        print_json(
            {
                "path": candidate.scan.path,
                "name": candidate.manifest.name if candidate.manifest else package.name,
                "source": str(package.root.source),
                "status": str(assessment.status),
                "trust": assessment.trust.method,
                "digest": candidate.scan.digest,
                "signer": assessment.trust.signer,
                "version": assessment.trust.version,
                "steps": steps,
                "diagnostics": [d.to_json() for d in diags],
            }
        )
    else:
        out = console()
        out.rule(safe(f"verify {candidate.scan.path}"))
        marks = {True: ("ok", "green"), False: ("FAIL", "red"), None: ("--", "dim")}
        for number, step in enumerate(steps, start=1):
            word, style = marks[step["ok"]]
            line = safe(f"{number:2}. [{word}] {step['step']}: ", style)
            line.append_text(safe(str(step["detail"])))
            out.print(line)
        if diags:
            print_diagnostic_rows(diags)
        style = {Status.ACTIVE: "green", Status.PENDING: "yellow"}.get(assessment.status, "red")
        out.print(safe(f"verdict: {assessment.status} ({assessment.trust.method})", style))
    if assessment.status is Status.ACTIVE:
        return EXIT_OK
    return EXIT_REFUSED if assessment.status is Status.PENDING else EXIT_FOUND_ERRORS


def _explain(package: Package, judged: Judgement, policy: Policy) -> list[dict[str, Any]]:
    candidate, verdict, assessment = judged.candidate, judged.verdict, judged.assessment
    scan, manifest = candidate.scan, candidate.manifest
    steps: list[dict[str, Any]] = []

    def add(step: str, ok: bool | None, detail: str) -> None:
        steps.append({"step": step, "ok": ok, "detail": detail})

    source = package.root.source
    add("source", None, f"{source} tool in {package.root.path}, {package.where}")
    if scan.digest is None:
        add("files", False, f"discovery refused the package ({', '.join(sorted({d.code for d in scan.diagnostics}))})")
        return steps
    add("files", True, f"{len(scan.files)} regular files read safely; digest {scan.digest}")
    if manifest is None or not candidate.valid:
        codes = ", ".join(sorted({d.code for d in candidate.diagnostics if d.severity is Severity.ERROR}))
        add("manifest", False, f"schema.json is invalid ({codes})")
        return steps
    add("manifest", True, f"schema.json is valid: {manifest.name}, risk {manifest.risk}")
    rules = policy.sources.for_source(source)
    ok_risk = manifest.risk.rank <= rules.max_risk.rank
    add("risk", ok_risk, f"risk {manifest.risk} {'within' if ok_risk else 'above'} the {source} limit {rules.max_risk}")
    if not ok_risk:
        return steps
    if not rules.require:
        add("trust", True, f"the {source} source needs no trust under this policy")
        return steps
    add("policy", None, f"{source} tools need one of: {', '.join(rules.require)}")
    if "pin" in rules.require:
        pinned = policy.pins.get(manifest.name)
        if pinned is None:
            add("pin", None, f"no pin for {manifest.name}")
        else:
            add("pin", pinned == scan.digest, f"pinned {pinned}" + ("" if pinned == scan.digest else " (differs)"))
    if "signature" in rules.require:
        if verdict is None:
            add("signature", None, "no tool.lock and no signature")
        else:
            steps.extend(s.to_json() for s in verdict.steps)
    if "approval" in rules.require:
        found = {d.code for d in assessment.diagnostics}
        if assessment.trust.trusted and assessment.trust.method != "approved":
            add("approval", None, f"not needed: trusted as {assessment.trust.method}")
        elif assessment.trust.method == "approved":
            add(
                "approval",
                True,
                f"approved with this digest{' (key ' + str(assessment.trust.signer) + ')' if assessment.trust.signer else ''}",
            )
        elif "changed-since-approval" in found:
            add("approval", False, "approved before, but the package changed since")
        elif "revoked-key" in found and assessment.trust.method == "unverified":
            add("approval", False, "the approval recorded a key that is now revoked")
        else:
            add("approval", None, "not approved ('tooldir allow' records an approval)")
    return steps
