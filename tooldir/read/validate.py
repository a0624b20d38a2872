"""PackageScan -> Candidate: strict JSON, the published manifest schema, names, input schema,
command safety and suspicious text. Pure: no I/O beyond reading the shipped manifest schema once.

The hot path uses the compiled ``jsonschema_rs`` validators (a few microseconds per manifest);
when a manifest is invalid the same engine lists every error with its pointer, so the decision and
its report can never disagree. Every validator is built with a retriever that refuses all
retrieval, and input schemas are compiled exactly as the registry compiles them
(:mod:`tooldir._internal.inputschema`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

import jsonschema_rs

from .._internal.inputschema import (
    DRAFT_2020_12,
    compile_error,
    compile_input_schema,
    inspect_schema,
    pattern_problem,
    refuse_retrieval,
)
from .._internal.strictjson import (
    FrozenDict,
    StrictJSONError,
    escape_pointer,
    freeze_arrays_in_place,
    loads,
)
from ..codes import DiagnosticCode
from ..model import (
    Diagnostic,
    Manifest,
    ServerManifest,
    Severity,
    error,
    manifest_from_checked,
    server_manifest_from_checked,
    warning,
)
from ..names import explain_invalid, is_valid_name
from ..netallow import AllowEntryError, parse_entry
from ..policy import Policy
from ..text import check_strings, plainly_clean
from .discover import MANIFEST, SERVER_MANIFEST, PackageScan

_SHELL_META = re.compile(r"[;&|`<>]|\$\(|\$\{|^\$|\$[A-Za-z_]")
#: An argument made only of these cannot hold a path separator, '~', '=', a variable or shell syntax.
_PLAIN_ARG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+,@%-]*")
#: Text findings reported one by one per kind (a 256 KiB manifest could hold thousands).
_MAX_TEXT_FINDINGS = 20
_KIND_WORDS = {"control": "control characters", "hidden": "invisible characters", "injection": "instruction-like text"}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "busybox", "env", "sudo", "doas"})


@dataclass(frozen=True, slots=True)
class Candidate:
    """A scanned package and, if it is well-formed, its manifest."""

    scan: PackageScan
    manifest: Manifest | None
    diagnostics: tuple[Diagnostic, ...]
    #: the manifest of an MCP server package (server.json, DESIGN §10); then ``manifest`` is None
    server: ServerManifest | None = None

    @property
    def name(self) -> str:
        """The manifest's tool name, else the package directory's name."""
        if self.manifest is not None:
            return self.manifest.name
        return self.server.name if self.server is not None else self.scan.name

    @property
    def declared(self) -> Manifest | ServerManifest | None:
        """Whichever manifest the package has (schema.json or server.json)."""
        return self.manifest if self.manifest is not None else self.server

    @property
    def valid(self) -> bool:
        return self.declared is not None and not any(d.severity is Severity.ERROR for d in self.diagnostics)


@cache
def manifest_schema() -> dict[str, Any]:
    """The published JSON Schema of schema.json (shipped in the package)."""
    text = resources.files("tooldir").joinpath("manifest.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _fast_manifest_validator() -> Any:
    return jsonschema_rs.Draft202012Validator(manifest_schema(), retriever=refuse_retrieval)


@cache
def _input_schema_meta_validator() -> Any:
    """Draft 2020-12 meta-schema with format assertion, so a ``pattern`` that is not a valid
    regex is caught here (plain meta-validation treats ``format`` as an annotation)."""
    return jsonschema_rs.Draft202012Validator(
        {"$ref": DRAFT_2020_12}, validate_formats=True, retriever=refuse_retrieval
    )


@cache
def _all_clear_validator() -> Any:
    """One pass for the common case: the manifest schema and the input schema's meta-schema (with
    format assertion) at once. Only when it says no do the separate checks run to find out what
    is wrong. None if the engine cannot build it. (Text: :func:`tooldir.text.plainly_clean`.)"""
    schema = {
        "$defs": {"manifest": manifest_schema()},
        "allOf": [
            {"$ref": "#/$defs/manifest"},
            {"properties": {"input_schema": {"$ref": DRAFT_2020_12}}},
        ],
    }
    try:
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=True, retriever=refuse_retrieval)
    except (ValueError, jsonschema_rs.ReferencingError):  # pragma: no cover - depends on the engine
        return None


@cache
def server_schema() -> dict[str, Any]:
    """The published JSON Schema of server.json (shipped in the package)."""
    text = resources.files("tooldir").joinpath("server.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _server_validator() -> Any:
    return jsonschema_rs.Draft202012Validator(server_schema(), retriever=refuse_retrieval)


def validate_package(scan: PackageScan, policy: Policy) -> Candidate:
    """The candidate of one scanned package. Its ``scan`` no longer holds the manifest's bytes
    (parsed here, never read again; a load of 10k tools would keep 25 MB of them), only the lock
    and signature bytes trust reads."""
    if scan.digest is None:
        return Candidate(scan, None, scan.diagnostics)
    if SERVER_MANIFEST in scan.contents:
        server = _ServerValidation(scan, policy)
        declared = server.run_server()
        return Candidate(scan, None, tuple(server.diags), declared)
    v = _Validation(scan, policy)
    manifest = v.run()
    return Candidate(_without_manifest_bytes(scan), manifest, tuple(v.diags))


_NO_CONTENTS: Mapping[str, bytes] = MappingProxyType({})


def _without_manifest_bytes(scan: PackageScan) -> PackageScan:
    contents = scan.contents
    if MANIFEST not in contents:
        return scan
    rest = (
        _NO_CONTENTS if len(contents) == 1 else MappingProxyType({k: v for k, v in contents.items() if k != MANIFEST})
    )
    # constructed directly (dataclasses.replace costs ~10 us a call); without the stats too, which
    # only the content index reads, from the scan as discovery made it (tooldir.read.index)
    return PackageScan(scan.source, scan.root, scan.name, scan.path, scan.files, rest, scan.digest, scan.diagnostics)


class _Validation:
    manifest_file = MANIFEST
    command_pointer = "/execute/command"

    def __init__(self, scan: PackageScan, policy: Policy) -> None:
        self.scan = scan
        self.policy = policy
        self.diags: list[Diagnostic] = []
        self.path = f"{scan.path}/{self.manifest_file}"
        self.raw = ""

    def fail(self, code: DiagnosticCode, message: str, pointer: str | None = None) -> None:
        self.diags.append(
            error(code, message, tool=self.scan.name, source=self.scan.source, path=self.path, pointer=pointer)
        )

    def warn(self, code: DiagnosticCode, message: str, pointer: str | None = None) -> None:
        self.diags.append(
            warning(code, message, tool=self.scan.name, source=self.scan.source, path=self.path, pointer=pointer)
        )

    def _parse(self) -> dict[str, Any] | None:
        """The folder-name check and the strict parse of :attr:`manifest_file` into a JSON object
        (``self.raw`` its text), or None with the reason recorded."""
        scan = self.scan
        if not is_valid_name(scan.name):
            self.fail(DiagnosticCode.INVALID_NAME, f"folder name {scan.name!r}: {explain_invalid(scan.name)}")
        raw = scan.contents[self.manifest_file]
        try:
            data = loads(raw, max_depth=self.policy.limits.max_json_depth, freeze_arrays=False)
        except StrictJSONError as exc:
            self.fail(DiagnosticCode(exc.code), exc.message, exc.pointer)
            return None
        if not isinstance(data, dict):
            self.fail(DiagnosticCode.SCHEMA_INVALID, f"the manifest must be a JSON object, not {_json_type(data)}", "")
            return None
        self.raw = raw.decode("utf-8")  # cannot fail: loads() accepted it
        return data

    def run(self) -> Manifest | None:
        scan = self.scan
        data = self._parse()
        if data is None:
            return None
        all_clear = _all_clear_validator()
        # Plain text (ASCII, no escapes that could hide characters, no injection pattern) that
        # passes every schema check in one pass has no schema error and no text finding.
        fast = all_clear is not None and plainly_clean(data, self.raw) and all_clear.is_valid(data)
        if not fast:
            self._check_text(data)
            if not _fast_manifest_validator().is_valid(data):
                self._report_schema_errors(data)
                return None
        name = data["name"]
        if name != scan.name:
            self.fail(
                DiagnosticCode.NAME_MISMATCH,
                f"manifest name {name!r} differs from its folder name {scan.name!r}",
                "/name",
            )
        self._check_input_schema(data["input_schema"], meta_checked=fast)
        self._check_command(data["execute"]["command"])
        self._check_network(data["execute"].get("network"), "/execute/network")
        if any(d.severity is Severity.ERROR for d in self.diags):
            return None
        freeze_arrays_in_place(data["input_schema"])  # the only part kept as parsed (the rest becomes tuples)
        return self._to_model(data)

    def _to_model(self, data: dict[str, Any]) -> Manifest | None:
        """The model of a manifest the schema accepted, built without validating again (the schema
        enforces every constraint of the model: :func:`tooldir.model.manifest_from_checked`)."""
        try:
            manifest = manifest_from_checked(data)
        except (KeyError, TypeError, ValueError) as exc:  # the schema rules it out; never a crash
            self.fail(
                DiagnosticCode.SCHEMA_INVALID, f"the manifest model cannot hold what the schema accepted: {exc}", ""
            )
            return None
        return manifest

    def _report_schema_errors(self, data: dict[str, Any], validator: Any = None) -> None:
        """Every error of the manifest validator that rejected ``data`` (the same engine, so a
        rejection always has a report), at most 20, each with its pointer."""
        before = len(self.diags)
        engine = validator if validator is not None else _fast_manifest_validator()
        errors = sorted(engine.iter_errors(data), key=lambda e: [str(p) for p in e.instance_path])
        named = False
        for err in errors[:20]:
            pointer = "".join(f"/{escape_pointer(str(p))}" for p in err.instance_path)
            kind = err.kind.name
            if kind == "additionalProperties":
                for key in sorted(str(k) for k in err.kind.unexpected):
                    self.fail(DiagnosticCode.SCHEMA_INVALID, f"unknown key {key!r}", f"{pointer}/{escape_pointer(key)}")
                continue
            if pointer == "/name" and isinstance(err.instance, str):
                if not named:  # length and alphabet are separate keywords; one diagnostic says both
                    self.fail(
                        DiagnosticCode.INVALID_NAME, f"name {err.instance!r}: {explain_invalid(err.instance)}", pointer
                    )
                    named = True
                continue
            message = _allow_entry_message(err, pointer) or _schema_message(err)
            if pointer == "/input_schema" or pointer.startswith("/input_schema/"):
                self.fail(DiagnosticCode.INVALID_INPUT_SCHEMA, f"input_schema: {message}", pointer)
                continue
            self.fail(DiagnosticCode.SCHEMA_INVALID, message, pointer or "")
        if len(self.diags) == before:  # never a rejection without a reason
            self.fail(
                DiagnosticCode.SCHEMA_INVALID,
                f"the manifest does not match the published schema of {self.manifest_file}",
                "",
            )

    def _check_input_schema(self, schema: FrozenDict, *, meta_checked: bool) -> None:
        """schema:remote-io (nothing that could make a validator fetch), then the meta-schema,
        then a compile exactly as the registry compiles (linear-time patterns, schema:redos)."""
        raw = self.raw
        # "$schema", "$id", "$ref", ... can only be present if the text has a "$" (or hides it in an escape);
        # a pattern only if it says "pattern".
        escaped = "\\" in raw and "\\u" in raw
        facts = inspect_schema(schema, "/input_schema") if "$" in raw or escaped or "pattern" in raw else None
        if facts is not None and facts.problems:
            for pointer, message in facts.problems:
                self.fail(DiagnosticCode.INVALID_INPUT_SCHEMA, message, pointer)
            return
        meta = _input_schema_meta_validator()
        if not meta_checked and not meta.is_valid(schema):
            before = len(self.diags)
            for exc in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.instance_path])[:5]:
                where = "".join(f"/{escape_pointer(str(p))}" for p in exc.instance_path)
                self.fail(
                    DiagnosticCode.INVALID_INPUT_SCHEMA,
                    f"input_schema is not a valid JSON Schema: {exc.message}",
                    "/input_schema" + where,
                )
            if len(self.diags) == before:  # never a rejection without a reason
                self.fail(
                    DiagnosticCode.INVALID_INPUT_SCHEMA,
                    "input_schema is not a valid JSON Schema (draft 2020-12)",
                    "/input_schema",
                )
            return
        if facts is None:
            return
        refused = 0
        for pointer, pattern in facts.patterns:  # each pattern as the registry's engine compiles it
            reason = pattern_problem(pattern)
            if reason is not None:
                self.fail(DiagnosticCode.INVALID_INPUT_SCHEMA, f"input_schema cannot be compiled: {reason}", pointer)
                refused += 1
                if refused == 5:  # enough to act on; the rest is not compiled at all
                    break
        if facts.has_refs and not any(d.code == DiagnosticCode.INVALID_INPUT_SCHEMA for d in self.diags):
            try:  # references must resolve: only compiling the schema tells
                compile_input_schema(schema)
            except (ValueError, jsonschema_rs.ReferencingError) as exc:
                pointer, reason = compile_error(exc, "/input_schema")
                self.fail(DiagnosticCode.INVALID_INPUT_SCHEMA, f"input_schema cannot be compiled: {reason}", pointer)

    def _check_command(self, argv: list[str]) -> None:
        # an argv entry starting with '-' is an option to whatever runs it, never a package file
        # (a decoy file named '-c' must not make ["python3", "-c", CODE] look like a script)
        files = {f.path: f for f in self.scan.files if not f.path.startswith("-")}
        interpreters = set(self.policy.exec.interpreters)
        for index, arg in enumerate(argv):
            if _PLAIN_ARG.fullmatch(arg):
                continue  # letters, digits and harmless punctuation only: nothing to check
            problem = _unsafe_arg(arg)
            if problem:
                self.fail(
                    DiagnosticCode.UNSAFE_COMMAND, f"argument {arg!r} {problem}", f"{self.command_pointer}/{index}"
                )
        if any(d.code == DiagnosticCode.UNSAFE_COMMAND for d in self.diags):
            return
        head = argv[0]
        if "/" not in head and head in interpreters:
            if head in files:
                # the sandbox would run the package's own file, while a reviewer reads "system python3"
                self.fail(
                    DiagnosticCode.UNSAFE_COMMAND,
                    f"argv[0] {head!r} is both an allowed interpreter and a file of the package; rename the file",
                    f"{self.command_pointer}/0",
                )
                return
            if head in _SHELLS and any(a.startswith("-") for a in argv[1:]):
                self.fail(
                    DiagnosticCode.UNSAFE_COMMAND,
                    f"shell {head!r} may only run a script file from the package",
                    self.command_pointer,
                )
                return
            if len(argv) < 2 or argv[1] not in files:
                why = " (an option, not a file)" if argv[1:2] and argv[1].startswith("-") else ""
                self.fail(
                    DiagnosticCode.UNSAFE_COMMAND,
                    f"interpreter {head!r} must be followed by a file of the package (got {argv[1:2]}{why})",
                    f"{self.command_pointer}/1",
                )
            return
        if head in _SHELLS or head.rsplit("/", 1)[-1] in _SHELLS:
            self.fail(
                DiagnosticCode.UNSAFE_COMMAND,
                f"{head!r} is a shell; tools run without one",
                f"{self.command_pointer}/0",
            )
        elif head.startswith("-"):
            self.fail(
                DiagnosticCode.UNSAFE_COMMAND,
                f"argv[0] {head!r} is an option, not a program",
                f"{self.command_pointer}/0",
            )
        elif head not in files:
            allowed = ", ".join(sorted(interpreters)) or "none"
            self.fail(
                DiagnosticCode.UNSAFE_COMMAND,
                f"argv[0] {head!r} is neither a file of the package nor an allowed interpreter ({allowed})",
                f"{self.command_pointer}/0",
            )
        elif not files[head].executable:
            self.fail(
                DiagnosticCode.UNSAFE_COMMAND,
                f"argv[0] {head!r} is not executable (chmod +x, or name an interpreter)",
                f"{self.command_pointer}/0",
            )

    def _check_network(self, network: Any, pointer: str) -> None:
        """Each ``network.allow`` entry the schema's pattern let through is a real ``HOST:PORT``
        (a port from 1 to 65535, host labels of at most 63 characters, a valid address)."""
        if not isinstance(network, dict):
            return
        for index, entry in enumerate(network.get("allow", ())):
            try:
                parse_entry(entry)
            except AllowEntryError as exc:
                self.fail(DiagnosticCode.SCHEMA_INVALID, f"network.allow: {exc}", f"{pointer}/allow/{index}")

    def _check_text(self, data: dict[str, Any]) -> None:
        """Every string of the manifest, keys included (text:schema-fields, text:control). At
        most ``_MAX_TEXT_FINDINGS`` diagnostics of each kind, then one that counts the rest."""
        report = check_strings(data, self.raw, limit=_MAX_TEXT_FINDINGS)
        for finding in report.findings:
            if finding.kind == "control":
                self.fail(
                    DiagnosticCode.CONTROL_CHARACTER,
                    f"control characters can rewrite what a terminal shows: {finding.detail}; remove them",
                    finding.pointer,
                )
            elif finding.kind == "hidden":
                self.warn(DiagnosticCode.SUSPICIOUS_TEXT, f"invisible characters: {finding.detail}", finding.pointer)
            else:
                self.warn(
                    DiagnosticCode.SUSPICIOUS_TEXT,
                    f"looks like an instruction to the model ({finding.detail}); review it in full",
                    finding.pointer,
                )
        for kind, count in report.omitted.items():
            more = f"{count} more strings with {_KIND_WORDS[kind]} are not listed"
            if kind == "control":
                self.fail(DiagnosticCode.CONTROL_CHARACTER, more, "")
            else:
                self.warn(DiagnosticCode.SUSPICIOUS_TEXT, more, "")


class _ServerValidation(_Validation):
    """server.json (an MCP server package, DESIGN §10): strict JSON, the published server schema
    (unknown keys are errors), the folder name, every string's text checks, and
    ``server.command`` under exactly the rules of ``execute.command``."""

    manifest_file = SERVER_MANIFEST
    command_pointer = "/server/command"

    def run_server(self) -> ServerManifest | None:
        scan = self.scan
        if MANIFEST in scan.contents:
            self.fail(
                DiagnosticCode.SCHEMA_INVALID,
                f"a package holds {MANIFEST} or {SERVER_MANIFEST}, never both; remove one",
                "",
            )
            return None
        data = self._parse()
        if data is None:
            return None
        self._check_text(data)
        validator = _server_validator()
        if not validator.is_valid(data):
            self._report_schema_errors(data, validator)
            return None
        if data["name"] != scan.name:
            self.fail(
                DiagnosticCode.NAME_MISMATCH,
                f"manifest name {data['name']!r} differs from its folder name {scan.name!r}",
                "/name",
            )
        self._check_command(data["server"]["command"])
        self._check_network(data["server"].get("network"), "/server/network")
        if any(d.severity is Severity.ERROR for d in self.diags):
            return None
        try:
            return server_manifest_from_checked(data)  # the schema enforces every constraint of the model
        except (KeyError, TypeError, ValueError) as exc:  # pragma: no cover - the schema rules it out
            self.fail(
                DiagnosticCode.SCHEMA_INVALID, f"the manifest model cannot hold what the schema accepted: {exc}", ""
            )
            return None


_ALLOW_ENTRY_POINTER = re.compile(r"/(execute|server)/network/allow/[0-9]+")


def _allow_entry_message(err: Any, pointer: str) -> str | None:
    """What is wrong with a ``network.allow`` entry the schema's pattern refused, in
    :func:`tooldir.netallow.parse_entry`'s words (never the bare regular expression)."""
    if err.kind.name != "pattern" or not isinstance(err.instance, str) or not _ALLOW_ENTRY_POINTER.fullmatch(pointer):
        return None
    try:
        parse_entry(err.instance)
    except AllowEntryError as exc:
        return f"network.allow: {exc}"
    return None


def _unsafe_arg(arg: str) -> str | None:
    """Why one argv entry is unsafe, or None. Checks the whole argument and every value embedded
    in it: after each ``=`` (``--out=/etc/x``) and after a short option (``-o/etc/x``)."""
    if "\x00" in arg or "\n" in arg or "\r" in arg:
        return "contains a NUL or line break"
    values = [arg, *arg.split("=")[1:]]
    if len(arg) > 2 and arg[0] == "-" and arg[1] != "-":
        values.append(arg[2:])
    for value in values:
        if value.startswith("/"):
            return "is or embeds an absolute path; only files inside the package may be named"
        if value.startswith("~"):
            return "is or embeds a '~' path; home directories are never expanded"
    if ".." in re.split(r"[/\\=:]", arg):
        return "contains a '..' component"
    if _SHELL_META.search(arg):
        return "contains shell syntax or a variable; commands run without a shell"
    return None


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def _schema_message(err: Any) -> str:
    """The engine's message, with every allowed value spelled out for an enum."""
    if err.kind.name == "enum":
        options = ", ".join(json.dumps(o) for o in err.kind.options)
        return f"{json.dumps(err.instance)} is not one of {options}"
    return str(err.message)
