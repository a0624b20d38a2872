"""The Registry: the only way anything runs.

``Registry.call(name, input)`` takes ``store.current`` once and walks the pipeline::

    resolve (active only) -> session gate -> input schema -> permission -> pre hooks
      -> builtin handler | sandbox -> post hooks -> audit

It never raises for tool-side failures: every outcome is a :class:`CallResult` and every outcome,
denials included, is one audit line. Error codes (``CallResult.error.code``) are stable: the
members of :class:`tooldir.codes.CallErrorCode`, each with what it means, or a code a host's
session gate (:class:`CallGate`) refused with.

Names are untrusted input too (an MCP client or ``os.fsdecode`` can hand over lone surrogates, NUL,
megabytes): a name that is not a valid tool name is ``unknown-tool`` saying why, and the audit line
records it escaped and capped at :data:`AUDIT_NAME_MAX` characters, with ``tool_sha256`` (sha256 of
the name's UTF-8 bytes, lone surrogates passed through) whenever the recorded form differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import jsonschema_rs

from .._internal.inputschema import DRAFT_2020_12, compile_error, compile_input_schema, input_errors, remote_io_problems
from .._internal.schema_worker import (
    BUDGET_S,
    BudgetedValidator,
    BudgetExceededError,
    MemoryBoundError,
    SchemaCompileError,
    WorkerFailedError,
)
from .._internal.strictjson import StrictJSONError, freeze, loads, thaw
from ..codes import CallErrorCode, GateCode
from ..errors import ExecutionError, PermissionDeniedError
from ..model import BuiltinSpec, Risk, Source, ToolRecord, is_runnable, why_not_runnable
from ..names import GUARD_TOOLS, explain_invalid, is_valid_name
from ..policy import Policy, load_policy
from ..sandbox import RunRequest, RunResult, Sandbox
from ..sandbox.output import sanitize_json, sanitize_text
from ..snapshot.store import Snapshot, SnapshotStore
from ..state import absolute_state_dir, default_state_dir
from ..trust.assess import builtin_record
from .audit import AuditEvent, AuditSink, JsonlAudit, Reservation, ReservingSink, input_digest
from .hooks import Deny, HookCall, HookSet, PostHook, PreHook, Redact, Rewrite, make_hook
from .permissions import PermissionCheck, PermissionRequest, from_policy
from .secrets import Redactor, SecretUnavailableError, declared_names
from .secrets import resolve as resolve_secrets

log = logging.getLogger("tooldir")

_VALIDATOR_CACHE = 1024
_MESSAGE_MAX = 500
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
#: Longest tool name written to the audit log as is; longer (or unprintable) ones are escaped,
#: capped and identified by their sha256.
AUDIT_NAME_MAX = 128


@dataclass(frozen=True, slots=True)
class CallError:
    code: CallErrorCode | GateCode
    message: str


@dataclass(frozen=True, slots=True)
class CallResult:
    ok: bool
    content: Any
    error: CallError | None
    audit_id: str | None
    network: tuple[Mapping[str, Any], ...] | None = None
    """For a tool run behind tooldir's egress proxy (``network.allow``): every connection it asked
    for -- host, port, resolved address, bytes up and down, and the reason if refused."""

    def to_json(self) -> dict[str, Any]:
        data = {
            "ok": self.ok,
            "content": thaw(self.content),
            "error": None if self.error is None else {"code": self.error.code, "message": self.error.message},
            "audit_id": self.audit_id,
        }
        if self.network is not None:
            data["network"] = [dict(c) for c in self.network]
        return data


class UpstreamCaller(Protocol):
    """Forwards a call of an upstream MCP tool to its server (:class:`tooldir.upstream.UpstreamHub`);
    raises :class:`ExecutionError` (``upstream-error``, ``upstream-unavailable``, ...)."""

    def call(self, record: ToolRecord, arguments: Mapping[str, Any]) -> Any: ...


class CallGate(Protocol):
    """Implemented by the session layer: may this session call this record now?"""

    def authorize(self, record: ToolRecord) -> tuple[str, str] | None:
        """None to allow, or (error code, message) to refuse."""
        ...


Handler = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class _Builtin:
    spec: BuiltinSpec
    handler: Handler
    record: ToolRecord
    validator: Any


class _Stop(Exception):
    """Ends the pipeline with an error result (internal control flow)."""

    def __init__(self, code: CallErrorCode | GateCode, message: str, *, ran: bool = False, content: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = _clip(_utf8_safe(message))
        self.ran = ran
        self.content = content


@dataclass(slots=True)
class _Trace:
    record: ToolRecord | None = None
    input: Any = None
    ran: bool = False
    started: float = field(default_factory=time.perf_counter)
    network: tuple[Mapping[str, Any], ...] | None = None
    secrets: tuple[str, ...] = ()  # the names given to the run (its audit line lists them)
    reservation: Reservation | None = None  # room for this call's audit line, made before its tool started


class Registry:
    """Builtins registered by the host plus the directory tools of ``store.current``.

    ``sandbox=None`` means: probe bubblewrap on the first directory-tool call and use it; if it does
    not work, refuse with ``sandbox-unavailable`` unless ``policy.sandbox.unsafe_allow_unsandboxed``.
    ``policy=None`` and ``state_dir=None`` mean what the CLI uses: the user's policy file and state
    folder (``$TOOLDIR_STATE_DIR`` or ``$XDG_STATE_HOME/tooldir``). A relative ``state_dir`` is
    refused (StateDirError): the audit log would be written into the project. ``secrets_file=None``
    is the CLI's too: ``$XDG_CONFIG_HOME/tooldir/secrets.toml``, read at each call that needs it.
    ``secret_commands=False`` makes a secret given by a command unavailable instead of running it
    (``tooldir drill``: a downloaded scenario's secrets file never runs anything on the host).
    """

    def __init__(
        self,
        store: SnapshotStore,
        *,
        policy: Policy | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        sandbox: Sandbox | None = None,
        audit: AuditSink | None = None,
        permissions: PermissionCheck | None = None,
        secrets_file: str | os.PathLike[str] | None = None,
        secret_commands: bool = True,
    ) -> None:
        if policy is None:
            policy = load_policy()[0]
        self._store = store
        self._policy = policy
        self._state_dir = (
            absolute_state_dir(state_dir, setting="Registry(state_dir=...)")
            if state_dir is not None
            else default_state_dir()
        )
        self._sandbox = sandbox
        self._own_sandbox = sandbox is None  # built (and re-probed) from the policy on demand
        self._own_permissions = permissions is None
        self._sandbox_problem: str | None = None
        self._sandbox_lock = threading.Lock()
        self._audit: AuditSink = audit if audit is not None else _default_audit(self._state_dir, policy)
        self._own_audit = audit is None
        self._permissions = permissions if permissions is not None else from_policy(policy.permissions)
        self._builtins: Mapping[str, _Builtin] = MappingProxyType({})
        self._register_lock = threading.Lock()
        self._hooks = HookSet()
        self._validators: OrderedDict[str, Any] = OrderedDict()
        self._validators_lock = threading.Lock()
        self._upstream: UpstreamCaller | None = None  # MCP server packages (tooldir.upstream)
        self._secrets_file = None if secrets_file is None else Path(secrets_file)
        self._secret_commands = secret_commands

    # ----------------------------------------------------------------------------- registration

    def register(
        self,
        name: str,
        input_schema: Mapping[str, Any],
        handler: Handler,
        *,
        description: str,
        risk: Risk | str = Risk.READ,
        guard: bool = False,
    ) -> BuiltinSpec:
        """Register a builtin Python tool; its name becomes reserved for directory tools.

        ``handler`` is called as ``handler(input=dict, context=dict)`` and returns the content.
        ``guard=True`` is for the session layer only (``tool_search``, ``defer_execute_tool``).

        Raises:
            ValueError: empty, invalid or duplicate name; a guard name without ``guard``; a schema
                that is not a valid JSON Schema of ``type: object``; a handler that cannot be called
                with ``input=`` and ``context=``; an unknown risk.
        """
        spec, schema = _checked_builtin(name, input_schema, handler, description=description, risk=risk, guard=guard)
        record = builtin_record(spec, defer_candidate=False)
        entry = _Builtin(spec, handler, record, _InProcess(compile_input_schema(schema)))
        with self._register_lock:
            if name in self._builtins:
                raise ValueError(f"a builtin named {name!r} is already registered")
            self._builtins = MappingProxyType({**self._builtins, name: entry})
        return spec

    def builtin_specs(self) -> tuple[BuiltinSpec, ...]:
        """The registered builtins, for ``make_config(builtins=...)`` so no directory tool can take
        their names."""
        return tuple(b.spec for b in sorted(self._builtins.values(), key=lambda b: b.spec.name))

    def add_pre_hook(self, hook: PreHook, *, name: str, match: str = "*") -> None:
        """``hook(*, call: HookCall, input: Mapping)`` -> None | Deny | Rewrite. Validated now."""
        self._hooks.add(make_hook("pre", hook, name=name, match=match))

    def add_post_hook(self, hook: PostHook, *, name: str, match: str = "*") -> None:
        """``hook(*, call: HookCall, content: Any)`` -> None | Redact. Validated now."""
        self._hooks.add(make_hook("post", hook, name=name, match=match))

    @property
    def store(self) -> SnapshotStore:
        return self._store

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def host_permissions(self) -> PermissionCheck | None:
        """The host's ``permissions=`` check, if one was given: then it alone decides, for this
        registry's calls and for the listing of every session over it (one object, one answer)."""
        return None if self._own_permissions else self._permissions

    def update_policy(self, policy: Policy) -> None:
        """Enforce a reloaded user policy from the next call on (the watcher reloads the policy
        file; a long-running host such as ``tooldir serve`` passes it here). Permission rules and
        sandbox limits built from the old policy are replaced; a sandbox supplied by the host is kept."""
        if policy == self._policy:
            return
        with self._sandbox_lock:
            old = self._policy
            self._policy = policy
            if self._own_permissions:
                self._permissions = from_policy(policy.permissions)
            if self._own_sandbox and policy.sandbox != old.sandbox:
                self._sandbox = None  # re-probed with the new limits on the next directory-tool call
                self._sandbox_problem = None
        log.info("registry now enforces the reloaded policy")

    def close(self) -> None:
        """Stop the background work this registry started itself: the spare sandboxes of the
        sandbox it built (their maker thread joined) and the audit log's interval syncing (its
        lines synced now). A sandbox or audit sink the host supplied is left alone. A later call
        still works: it builds and probes a sandbox again, and its audit line is synced at once."""
        with self._sandbox_lock:
            box = self._sandbox if self._own_sandbox else None
            if self._own_sandbox:
                self._sandbox = None
                self._sandbox_problem = None
        close_box = getattr(box, "close", None)
        if callable(close_box):
            close_box()
        close_audit = getattr(self._audit, "close", None) if self._own_audit else None
        if callable(close_audit):
            close_audit()

    # ----------------------------------------------------------------------------- the call

    def call(
        self,
        name: str,
        input: Mapping[str, Any],
        *,
        session: CallGate | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> CallResult:
        """Run one tool through the whole pipeline. Never raises for tool-side failures."""
        trace = _Trace()
        session_id = getattr(session, "id", None)
        snapshot = self._store.current
        try:
            content = self._pipeline(name, input, session=session, context=context, snapshot=snapshot, trace=trace)
        except _Stop as stop:
            trace.ran = trace.ran or stop.ran
            return self._finish(trace, name, session_id, snapshot.id, error=stop)
        except Exception as exc:  # a bug in tooldir: still a result and an audit line, never a traceback
            log.exception("internal error in Registry.call")
            failure = _Stop(CallErrorCode.INTERNAL_ERROR, f"tooldir failed on this call: {type(exc).__name__}: {exc}")
            return self._finish(trace, name, session_id, snapshot.id, error=failure)
        return self._finish(trace, name, session_id, snapshot.id, content=content)

    def _pipeline(
        self,
        name: str,
        raw_input: Any,
        *,
        session: CallGate | None,
        context: Mapping[str, Any] | None,
        snapshot: Snapshot,
        trace: _Trace,
    ) -> Any:
        trace.input = raw_input  # hashed into the audit line even if the call is refused early
        builtin = self._builtins.get(name) if isinstance(name, str) else None
        record = builtin.record if builtin is not None else self._resolve(name, snapshot)
        if builtin is not None and not is_runnable(record):  # never: register() made it through trust
            raise _Stop(CallErrorCode.NOT_ACTIVE, why_not_runnable(name, record))
        trace.record = record
        if session is not None:
            try:
                refusal = session.authorize(record)
            except Exception as exc:  # a broken gate refuses: fail closed
                raise _Stop(
                    CallErrorCode.SESSION_REFUSED, f"the session check failed: {type(exc).__name__}: {exc}"
                ) from None
            if refusal is not None:
                if not (isinstance(refusal, tuple) and len(refusal) == 2):
                    raise _Stop(
                        CallErrorCode.SESSION_REFUSED, f"the session gate refused with {type(refusal).__name__}"
                    )
                code, message = refusal
                raise _Stop(_gate_code(code), str(message))
        ahead = None if builtin is not None else self._prepare_ahead(record)  # overlaps validation etc.; runs nothing
        validator = builtin.validator if builtin is not None else self._validator_for(record)
        data = self._check_input(raw_input, validator)
        trace.input = data
        risk = record.risk or Risk.EXEC
        try:
            self._permissions.check(PermissionRequest(record.name, record.source, risk))
        except PermissionDeniedError as exc:
            raise _Stop(exc.code, exc.message) from None
        call = HookCall(record.name, record.source, risk, record.digest, getattr(session, "id", None))
        data = self._run_pre_hooks(call, data, validator)
        trace.input = data
        ctx = _check_context(context)
        self._reserve_audit(trace, name, session, snapshot)  # the last step before anything runs
        if builtin is not None:
            trace.ran = True
            try:
                content = builtin.handler(input=data, context=ctx)
            except Exception as exc:
                raise _Stop(CallErrorCode.HANDLER_FAILED, f"{type(exc).__name__}: {exc}", ran=True) from None
        else:
            content = self._run_directory_tool(record, data, ctx, ahead=ahead, trace=trace)
            trace.ran = True
        content = self._run_post_hooks(call, content)
        try:
            json.dumps(content, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _Stop(CallErrorCode.INVALID_OUTPUT, f"the result is not plain JSON: {exc}", ran=True) from None
        return content

    def _resolve(self, name: Any, snapshot: Snapshot) -> ToolRecord:
        if not isinstance(name, str):
            raise _Stop(CallErrorCode.UNKNOWN_TOOL, f"tool name must be a string, not {type(name).__name__}")
        record = snapshot.by_name.get(name)
        if record is not None and record.source is Source.BUILTIN:
            raise _Stop(CallErrorCode.UNKNOWN_TOOL, f"builtin {name!r} is not registered in this registry")
        if record is not None and record.manifest is not None and is_runnable(record):
            return record
        if record is None:
            others = [r for r in snapshot.records(name) if r.source is not Source.BUILTIN]
            if not others:
                raise _Stop(CallErrorCode.UNKNOWN_TOOL, _unknown_name_message(name))
            record = others[-1]
        # pending, rejected, shadowed, or marked active but not by the trust stage: never run
        raise _Stop(CallErrorCode.NOT_ACTIVE, why_not_runnable(name, record))

    def _validator_for(self, record: ToolRecord) -> Any:
        assert record.manifest is not None  # noqa: S101 - _resolve returns active tools with manifests
        key = record.digest or record.name
        with self._validators_lock:
            found = self._validators.get(key)
            if found is not None:
                self._validators.move_to_end(key)
                return found
        schema = record.manifest.input_schema
        problems = remote_io_problems(schema, "/input_schema")
        if problems:  # discovery refuses these; checked again so no validator can ever fetch anything
            where, why = problems[0]
            raise _Stop(CallErrorCode.INVALID_SCHEMA, f"the tool's input_schema is refused at {where}: {why}")
        try:  # compiled here once so a broken schema is reported as such, then checked in a worker
            compile_input_schema(schema)
        except (ValueError, jsonschema_rs.ReferencingError) as exc:
            where, why = compile_error(exc, "/input_schema")
            raise _Stop(
                CallErrorCode.INVALID_SCHEMA, f"the tool's input_schema cannot be compiled at {where}: {why}"
            ) from None
        validator = _Budgeted(BudgetedValidator(key, thaw(schema)))
        with self._validators_lock:
            self._validators[key] = validator
            while len(self._validators) > _VALIDATOR_CACHE:
                self._validators.popitem(last=False)
        return validator

    def _check_input(self, raw: Any, validator: Any) -> dict[str, Any]:
        if not isinstance(raw, Mapping):
            raise _Stop(CallErrorCode.INVALID_INPUT, f"input must be a JSON object, not {type(raw).__name__}")
        try:
            text = json.dumps(raw, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            size = len(text.encode())  # a lone surrogate (UnicodeEncodeError) is not JSON text either
        except (TypeError, ValueError) as exc:
            raise _Stop(CallErrorCode.INVALID_INPUT, f"input is not plain JSON: {exc}") from None
        limit = self._policy.sandbox.max_input_bytes
        if size > limit:
            raise _Stop(CallErrorCode.INVALID_INPUT, f"input is larger than {limit} bytes")
        try:
            data: dict[str, Any] = thaw(loads(text.encode(), max_depth=self._policy.limits.max_json_depth))
        except StrictJSONError as exc:
            raise _Stop(CallErrorCode.INVALID_INPUT, f"input rejected ({exc.code}): {exc.message}") from None
        try:
            errors = validator.errors(text, data)
        except BudgetExceededError:
            raise _Stop(
                CallErrorCode.INVALID_INPUT,
                f"validating the input against the tool's input_schema took more than {BUDGET_S:g} s of CPU time "
                "and was stopped; the input is refused",
            ) from None
        except MemoryBoundError as exc:
            raise _Stop(
                CallErrorCode.INVALID_INPUT,
                f"validating the input against the tool's input_schema needed more than {exc.limit >> 20} MiB and "
                "was stopped; the input is refused",
            ) from None
        except WorkerFailedError as exc:
            raise _Stop(CallErrorCode.INVALID_INPUT, f"the input could not be validated: {exc}") from None
        except SchemaCompileError as exc:
            raise _Stop(CallErrorCode.INVALID_SCHEMA, f"the tool's input_schema cannot be compiled: {exc}") from None
        if errors:
            raise _Stop(
                CallErrorCode.INVALID_INPUT, "input does not match the tool's input_schema: " + "; ".join(errors)
            )
        return data

    def _run_pre_hooks(self, call: HookCall, data: dict[str, Any], validator: Any) -> dict[str, Any]:
        for hook in self._hooks.pre(call.tool):
            try:
                outcome = hook.fn(call=call, input=MappingProxyType(data))
            except Exception as exc:
                raise _Stop(
                    CallErrorCode.HOOK_FAILED, f"pre hook {hook.name!r} raised {type(exc).__name__}: {exc}"
                ) from None
            if outcome is None:
                continue
            if isinstance(outcome, Deny):
                raise _Stop(CallErrorCode.HOOK_DENIED, f"pre hook {hook.name!r}: {outcome.reason}")
            if isinstance(outcome, Rewrite):
                try:
                    data = self._check_input(outcome.input, validator)
                except _Stop as stop:
                    raise _Stop(
                        CallErrorCode.HOOK_FAILED, f"pre hook {hook.name!r} rewrote the input: {stop.message}"
                    ) from None
                continue
            raise _Stop(
                CallErrorCode.HOOK_FAILED,
                f"pre hook {hook.name!r} returned {type(outcome).__name__}, not Deny/Rewrite/None",
            )
        return data

    def _run_post_hooks(self, call: HookCall, content: Any) -> Any:
        for hook in self._hooks.post(call.tool):
            try:
                outcome = hook.fn(call=call, content=content)
            except Exception as exc:
                raise _Stop(
                    CallErrorCode.HOOK_FAILED, f"post hook {hook.name!r} raised {type(exc).__name__}: {exc}", ran=True
                ) from None
            if outcome is None:
                continue
            if isinstance(outcome, Redact):
                content = outcome.content
                continue
            raise _Stop(
                CallErrorCode.HOOK_FAILED,
                f"post hook {hook.name!r} returned {type(outcome).__name__}, not Redact/None",
                ran=True,
            )
        return content

    # ----------------------------------------------------------------------------- sandbox

    def sandbox(self) -> Sandbox | None:
        """The sandbox directory tools run in, probing bubblewrap the first time; None when no
        sandbox works and unsandboxed runs are not allowed (see :meth:`sandbox_problem`)."""
        with self._sandbox_lock:
            if self._sandbox is None and self._sandbox_problem is None:
                from ..sandbox import BubblewrapSandbox, UnsafeUnsandboxed, probe

                problem = probe(self._policy.sandbox)
                if problem is None:
                    self._sandbox = BubblewrapSandbox(self._policy.sandbox, self._state_dir)
                elif self._policy.sandbox.unsafe_allow_unsandboxed:
                    log.warning("no working sandbox (%s); policy sandbox.unsafe_allow_unsandboxed is set", problem)
                    self._sandbox = UnsafeUnsandboxed(self._policy.sandbox, self._state_dir)
                else:
                    self._sandbox_problem = problem
            return self._sandbox

    def sandbox_problem(self) -> str | None:
        self.sandbox()
        return self._sandbox_problem

    def attach_upstream(self, upstream: UpstreamCaller | None) -> None:
        """Where calls of upstream MCP tools (records with ``upstream``) go: a
        :class:`tooldir.upstream.UpstreamHub`. Without one they fail ``upstream-unavailable``."""
        self._upstream = upstream

    def _run_upstream(self, record: ToolRecord, data: dict[str, Any]) -> Any:
        upstream = self._upstream
        if upstream is None:
            raise _Stop(
                CallErrorCode.UPSTREAM_UNAVAILABLE,
                f"no session with the MCP server of {record.name!r} in this registry",
            )
        try:
            return upstream.call(record, data)
        except ExecutionError as exc:
            raise _Stop(exc.code, exc.message, ran=True) from None

    def _run_directory_tool(
        self,
        record: ToolRecord,
        data: dict[str, Any],
        ctx: dict[str, Any],
        *,
        ahead: threading.Thread | None = None,
        trace: _Trace | None = None,
    ) -> Any:
        if record.upstream is not None:  # an MCP server package's tool (DESIGN §10)
            return self._run_upstream(record, data)
        manifest = record.manifest
        assert manifest is not None  # noqa: S101 - only active directory tools reach here
        if ahead is not None:
            # this call's own set-up request must reach the sandbox before its run looks for it:
            # else the run sets up another sandbox, and the one asked for ahead is made after the
            # call and left held (found as "processes left running" by tests/sandbox/battery.py).
            # It only probes and queues (the run waits for the probe on the sandbox lock anyway).
            ahead.join()
        box = self.sandbox()
        if box is None:
            raise _Stop(
                CallErrorCode.SANDBOX_UNAVAILABLE,
                f"no working sandbox: {self._sandbox_problem}. Install bubblewrap, or (unsafe) set "
                "sandbox.unsafe_allow_unsandboxed = true in the policy",
            )
        sp = self._policy.sandbox
        envelope = json.dumps({"version": 1, "input": data, "context": ctx}, ensure_ascii=False, allow_nan=False)
        secrets = self._resolve_secrets(record)  # after validation, permission and hooks; before the run
        if trace is not None:
            trace.secrets = tuple(secrets)
        redactor = Redactor(secrets)
        request = self._run_request(record, envelope.encode(), secrets)
        timeout = request.timeout_s
        try:
            try:
                result = box.run(request)
            except ExecutionError as exc:
                raise _Stop(exc.code, exc.message) from None
            except OSError as exc:  # the backend failed at the OS level: never a traceback to the caller
                raise _Stop(CallErrorCode.SANDBOX_FAILED, f"the sandbox could not run the tool: {exc}") from None
            if trace is not None and result.network is not None:
                # a host name the tool asked for can carry a secret's value: redacted like its output
                network = [dict(c) for c in result.network]
                trace.network = tuple(redactor.json(network) if redactor else network)
            if redactor:  # what leaves the sandbox never carries a secret's value (raw, base64, URL-encoded)
                result = replace(result, stdout=redactor.data(result.stdout), stderr=redactor.data(result.stderr))
            return redactor.json(_interpret(result, timeout, sp.max_output_bytes))
        except _Stop as stop:
            if not redactor:
                raise
            raise _Stop(
                stop.code, redactor.text(stop.message), ran=stop.ran, content=redactor.json(stop.content)
            ) from None

    def _resolve_secrets(self, record: ToolRecord) -> dict[str, str]:
        """The values of the secrets ``record`` declares, as the user's policy grants and the
        secrets file holds them (commands run now); ``secret-unavailable`` for the first that is not."""
        manifest = record.manifest
        assert manifest is not None  # noqa: S101 - only active directory tools reach here
        declared = declared_names(manifest.execute.secrets)
        if not declared:
            return {}
        if record.source is Source.PROJECT and not self._policy.secrets.project_tools:
            raise _Stop(
                CallErrorCode.SECRET_UNAVAILABLE,
                f"tool {record.name!r} comes from the project, and secrets ({', '.join(declared)}) reach only "
                "tools from your own tool folders; copy the tool into your user folder, or set "
                "secrets.project_tools = true in your policy (a weakening)",
            )
        try:
            return resolve_secrets(
                record.name,
                declared,
                self._policy.secrets.grants,
                secrets_file=self._secrets_file,
                run_commands=self._secret_commands,
            )
        except SecretUnavailableError as exc:
            raise _Stop(CallErrorCode.SECRET_UNAVAILABLE, exc.message) from None

    def _run_request(self, record: ToolRecord, stdin: bytes, secrets: Mapping[str, str] | None = None) -> RunRequest:
        """The sandbox run of ``record`` as the policy and the environment say now (with the
        secrets resolved for it, if any)."""
        manifest = record.manifest
        assert manifest is not None  # noqa: S101 - only active directory tools reach here
        sp = self._policy.sandbox
        timeout = min(manifest.execute.timeout_s or sp.timeout_s, sp.timeout_s)
        allowed = set(sp.env_allow)
        env = {k: os.environ[k] for k in manifest.execute.env if k in allowed and k in os.environ}
        grant = sp.network_grant(manifest.execute.declared_network())
        if grant.kind == "unrestricted" and stdin:  # a real run (not a set-up ahead): logged every time
            log.warning(
                "running %s with the host's network, unrestricted (policy sandbox.network_unrestricted = true)",
                record.name,
            )
        egress = grant.allow if grant.kind == "allow" else None
        return RunRequest(record, stdin, timeout, env, grant.kind == "unrestricted", dict(secrets or {}), egress=egress)

    def _prepare_ahead(self, record: ToolRecord, *, create_copy: bool = False) -> threading.Thread | None:
        """Ask the sandbox to set up ``record``'s run in the background now (bubblewrap started,
        held at its ``--block-fd``: no tool code runs until :meth:`_run_directory_tool` releases
        it, after permission and hooks). A no-op for upstream tools and sandboxes without it.
        Returns the thread that probes the sandbox first and then asks (a process's first call),
        which the call's run joins; None when the request was made here."""
        if record.upstream is not None or record.manifest is None:
            return None
        if record.manifest.execute.secrets:  # its run needs its secrets, resolved only after the hooks
            return None
        request = self._run_request(record, b"")
        if self._sandbox is None and self._sandbox_problem is None:
            # not probed yet (a process's first call): probe on a thread of its own too, so the
            # probe also overlaps the call (whose run waits for it on the sandbox lock)
            thread = threading.Thread(
                target=self._ahead, args=(request, create_copy), name="tooldir-sandbox-ahead", daemon=True
            )
            thread.start()
            return thread
        self._ahead(request, create_copy)
        return None

    def _ahead(self, request: RunRequest, create_copy: bool) -> None:
        try:
            ahead = getattr(self.sandbox(), "prepare_ahead", None)
            if ahead is not None:
                ahead(request, create_copy=create_copy)  # made on the sandbox's long-lived spare thread
        except Exception as exc:  # an optimisation only: the run sets its sandbox up itself
            log.debug("could not prepare %s ahead: %s", request.record.name, exc)

    def prepare_sandboxes(self, names: Iterable[str] | None = None) -> int:
        """Set up, in the background, the sandboxes of the first runs of directory tools of the
        current snapshot (``names``, or the active ones, eager before deferred), so such a first call only releases a
        sandbox that waits ready. At most ``tooldir.sandbox.bubblewrap.MAX_SPARES`` are held
        (the newest asked win); none for tools with network or secrets, or without a working bubblewrap.
        Nothing runs: a prepared sandbox starts its tool only when a call of it passed
        validation, permission and hooks. Returns how many were asked for."""
        from ..sandbox.bubblewrap import MAX_SPARES

        snapshot = self._store.current
        if names is None:
            wanted = sorted(snapshot.active(), key=lambda r: r.defer_candidate)  # stable: snapshot order within each
        else:
            wanted = [r for n in names if (r := snapshot.get(n)) is not None]
        records = [r for r in wanted if r.source is not Source.BUILTIN and is_runnable(r) and r.upstream is None]
        sp = self._policy.sandbox
        records = [
            r
            for r in records
            if r.manifest is not None
            and sp.network_grant(r.manifest.execute.declared_network()).kind == "none"
            and not r.manifest.execute.secrets
        ]
        records = records[:MAX_SPARES]
        for record in records:
            self._prepare_ahead(record, create_copy=True)
        return len(records)

    # ----------------------------------------------------------------------------- audit

    def _reserve_audit(self, trace: _Trace, name: str, session: CallGate | None, snapshot: Snapshot) -> None:
        """No tool starts unless its audit line is sure to be written (issue 23 item 10): a sink
        that can reserve (the JSONL log) reserves room for the line now, or the call is refused
        (``audit-unavailable``). A host's own sink without ``reserve`` is not asked."""
        sink = self._audit
        if not hasattr(sink, "reserve"):
            return
        reserving: ReservingSink = sink  # type: ignore[assignment]
        intent = self._event(trace, name, getattr(session, "id", None), snapshot.id, status="started")
        try:
            trace.reservation = reserving.reserve(intent)
        except OSError as exc:
            log.error("audit log unavailable, call of %r refused before it started: %s", name, exc)
            raise _Stop(
                CallErrorCode.AUDIT_UNAVAILABLE,
                f"the audit log cannot take this call's line, so the tool was not started: {_os_error(exc)}",
            ) from None

    def _event(
        self,
        trace: _Trace,
        name: str,
        session_id: Any,
        snapshot_id: str,
        *,
        status: str,
        code: CallErrorCode | GateCode | None = None,
        message: str | None = None,
    ) -> AuditEvent:
        record = trace.record
        tool, tool_sha256 = audit_name(name)
        return AuditEvent(
            tool=tool,
            tool_sha256=tool_sha256,
            source=None if record is None else str(record.source),
            digest=None if record is None else record.digest,
            input_sha256=input_digest(trace.input),
            decision="allow" if trace.ran or status == "started" else "deny",
            reason=None if code is None else f"{code}: {message}",  # _Stop made the message UTF-8-safe
            status=status,
            error_code=code,
            duration_ms=(time.perf_counter() - trace.started) * 1000,
            snapshot=snapshot_id,
            session=None if session_id is None else _utf8_safe(str(session_id))[:AUDIT_NAME_MAX],
            network=trace.network,
            secrets=trace.secrets,
        )

    def _finish(
        self,
        trace: _Trace,
        name: str,
        session_id: Any,
        snapshot_id: str,
        *,
        content: Any = None,
        error: _Stop | None = None,
    ) -> CallResult:
        ok = error is None
        code = None if error is None else error.code
        message = None if error is None else error.message
        if error is not None:
            content = error.content
        status = "ok" if ok else ("error" if trace.ran else "denied")
        event = self._event(trace, name, session_id, snapshot_id, status=status, code=code, message=message)
        reservation = trace.reservation
        try:
            if reservation is not None:
                audit_id = self._audit.record_reserved(event, reservation)  # type: ignore[attr-defined]
            else:
                audit_id = self._audit.record(event)
        except OSError as exc:
            log.error("audit log unavailable: %s", exc)
            if code == CallErrorCode.AUDIT_UNAVAILABLE:  # the refusal itself could not be logged: still that refusal
                return CallResult(False, None, CallError(code, message or ""), None)
            return CallResult(
                False,
                None,
                CallError(CallErrorCode.AUDIT_FAILED, f"the audit log could not be written: {_os_error(exc)}"),
                None,
            )
        failure = None if ok else CallError(code or CallErrorCode.TOOL_FAILED, message or "")
        return CallResult(ok, content, failure, audit_id, trace.network)


def builtin_spec(
    name: str, input_schema: Mapping[str, Any], handler: Handler, *, description: str, risk: Risk | str = Risk.READ
) -> BuiltinSpec:
    """The spec :meth:`Registry.register` would make of this builtin, with the same checks (and
    ``ValueError``s), before any registry exists: a composition root reserves the names of its
    builtins in the load (``make_config(builtins=...)``) and registers them once the registry is made."""
    return _checked_builtin(name, input_schema, handler, description=description, risk=risk, guard=False)[0]


def _checked_builtin(
    name: str,
    input_schema: Mapping[str, Any],
    handler: Handler,
    *,
    description: str,
    risk: Risk | str,
    guard: bool,
) -> tuple[BuiltinSpec, dict[str, Any]]:
    if not isinstance(name, str) or not is_valid_name(name):
        raise ValueError(f"builtin name {name!r} must match [A-Za-z0-9_-]{{1,64}}")
    if name in GUARD_TOOLS and not guard:
        raise ValueError(f"{name!r} is a guard tool name; only the session layer registers it")
    if guard and name not in GUARD_TOOLS:
        raise ValueError(f"guard=True is only for {sorted(GUARD_TOOLS)}, not {name!r}")
    if not isinstance(description, str) or not description.strip():
        raise ValueError(f"builtin {name!r} needs a non-empty description")
    try:
        level = Risk(risk)
    except ValueError:
        raise ValueError(f"builtin {name!r}: risk {risk!r} is not one of {[str(r) for r in Risk]}") from None
    schema = _check_builtin_schema(name, input_schema)
    _check_handler(name, handler)
    return BuiltinSpec(name=name, description=description, input_schema=freeze(schema), risk=level), schema


def _default_audit(state_dir: Path, policy: Policy) -> AuditSink:
    """The hash-chained log in the state dir, synced per the policy's ``audit.durability`` (a
    weakened mode is logged here and written into each of its lines)."""
    mode = policy.audit.durability
    if mode == "interval":
        interval = policy.audit.sync_interval_ms
        log.warning(
            "audit lines are synced to disk up to %d ms after their call returns, not before (policy "
            "audit.durability = 'interval'): a power cut or OS crash can lose the lines of that last interval",
            interval,
        )
        return JsonlAudit.in_state_dir(state_dir, sync_interval_s=interval / 1000)
    if mode != "fsync":
        log.warning("audit lines are not synced to disk before calls return (policy audit.durability = 'buffered')")
    return JsonlAudit.in_state_dir(state_dir, durable=mode == "fsync")


def _os_error(exc: OSError) -> str:
    """One line naming the OS error and the file: ``[Errno 28] No space left on device: '/x'``."""
    text = f"{exc.strerror or exc}" + (f" (errno {exc.errno})" if exc.errno else "")
    return text + (f": {exc.filename}" if exc.filename else "")


def _unknown_name_message(name: str) -> str:
    if is_valid_name(name):
        return f"no tool named {name!r}"
    shown, digest = audit_name(name)
    return f"no tool named '{shown}' ({digest}): not a valid tool name; {explain_invalid(name)}"


def audit_name(name: Any) -> tuple[str, str | None]:
    """How a requested tool name is written to the audit log: (printable form, sha256 or None).

    A valid name is written as is. Anything else (not a string, lone surrogates, control
    characters, longer than :data:`AUDIT_NAME_MAX`) is escaped (``repr`` style), capped, and
    identified by ``sha256:`` of the raw name's bytes (UTF-8 with surrogates passed through; the
    ``repr`` for a non-string), so two different odd names never share an audit identity."""
    if isinstance(name, str) and is_valid_name(name) and len(name) <= AUDIT_NAME_MAX:
        return name, None
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogatepass")
        shown = repr(name)[1:-1]  # escapes surrogates, controls and quotes alike
    else:
        shown = repr(name)
        raw = _utf8_safe(shown).encode()
    shown = _utf8_safe(shown)
    if len(shown) > AUDIT_NAME_MAX:
        shown = shown[: AUDIT_NAME_MAX - 3] + "..."
    return shown, "sha256:" + hashlib.sha256(raw).hexdigest()


def _gate_code(code: object) -> CallErrorCode | GateCode:
    """The code a session gate refused with: one of tooldir's as its member, any other text as it
    is (a host's own), none at all ``session-refused``."""
    text = str(code)
    if not text:
        return CallErrorCode.SESSION_REFUSED
    try:
        return CallErrorCode(text)
    except ValueError:
        return GateCode(text)


def _utf8_safe(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (lone surrogates) written as ``\\udcff``."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def _interpret(result: RunResult, timeout: float, cap: int) -> Any:
    err_tail = sanitize_text(result.stderr[-2000:].decode("utf-8", "replace")).strip()
    if result.timed_out:
        raise _Stop(CallErrorCode.TIMEOUT, f"killed after the {timeout:g} s wall-clock limit", ran=True)
    if result.stdout_truncated or result.stderr_truncated:
        which = "stdout" if result.stdout_truncated else "stderr"
        text = sanitize_text(result.stdout.decode("utf-8", "replace"))
        raise _Stop(
            CallErrorCode.OUTPUT_TOO_LARGE,
            f"the tool wrote more than {cap} bytes to {which}; it was killed and the output truncated",
            ran=True,
            content=text + f"\n[... truncated at {cap} bytes]",
        )
    if result.exit_code != 0:
        how = f"was killed by signal {result.signal}" if result.signal else f"exited with status {result.exit_code}"
        if result.memory_exceeded:
            how += " after going over its memory limit (sandbox.memory_mb)"
        raise _Stop(
            CallErrorCode.TOOL_FAILED,
            f"the tool {how}" + (f": {err_tail[-_MESSAGE_MAX:]}" if err_tail else ""),
            ran=True,
        )
    text = result.stdout.decode("utf-8", "replace")
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            answer = loads(stripped.encode(), max_depth=64)
        except StrictJSONError:
            answer = None
        if isinstance(answer, Mapping) and isinstance(answer.get("ok"), bool):
            content = sanitize_json(thaw(answer.get("content")))
            if answer["ok"]:
                return content
            message = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            raise _Stop(CallErrorCode.TOOL_ERROR, message or "the tool reported an error", ran=True, content=content)
    return sanitize_text(text)


def _check_context(context: Any) -> dict[str, Any]:
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise _Stop(CallErrorCode.INVALID_INPUT, f"context must be a JSON object, not {type(context).__name__}")
    try:
        json.dumps(context, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _Stop(CallErrorCode.INVALID_INPUT, f"context is not plain JSON: {exc}") from None
    plain: dict[str, Any] = thaw(context)
    return plain


def _check_builtin_schema(name: str, schema: Any) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise ValueError(f"builtin {name!r}: input_schema must be a JSON object")
    plain: dict[str, Any] = thaw(schema)
    if plain.get("type") != "object":
        raise ValueError(f"builtin {name!r}: input_schema must have type 'object', not {plain.get('type')!r}")
    try:
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"builtin {name!r}: input_schema is not plain JSON: {exc}") from None
    for where, why in remote_io_problems(plain)[:1]:  # first: nothing below may see a foreign $schema
        raise ValueError(f"builtin {name!r}: input_schema at {where or '/'}: {why}")
    try:
        checked = dict(plain)
        checked.setdefault("$schema", DRAFT_2020_12)
        jsonschema_rs.meta.validate(checked)
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        raise ValueError(f"builtin {name!r}: input_schema is not a valid JSON Schema: {exc}") from None
    try:
        compile_input_schema(plain)
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        where, why = compile_error(exc, "")
        raise ValueError(f"builtin {name!r}: input_schema cannot be compiled at {where or '/'}: {why}") from None
    return plain


def _check_handler(name: str, handler: Any) -> None:
    import inspect

    if not callable(handler):
        raise ValueError(f"builtin {name!r}: handler is not callable")
    try:
        inspect.signature(handler).bind(input=None, context=None)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"builtin {name!r}: handler must accept keyword arguments input= and context= ({exc})"
        ) from None


class _InProcess:
    """A builtin's input validator: the host's own schema, compiled once, checked in-process."""

    __slots__ = ("compiled",)

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def errors(self, text: str, data: Any) -> list[str]:
        return input_errors(self.compiled, data)


class _Budgeted:
    """A directory tool's input validator: checked in a worker process within ``BUDGET_S`` of its CPU time."""

    __slots__ = ("inner",)

    def __init__(self, inner: BudgetedValidator) -> None:
        self.inner = inner

    def errors(self, text: str, data: Any) -> list[str]:
        return self.inner.errors(text)


def _clip(message: str) -> str:
    return message if len(message) <= _MESSAGE_MAX * 2 else message[: _MESSAGE_MAX * 2] + " [...]"
