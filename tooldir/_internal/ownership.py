"""Who may have changed a file: the one ownership rule of discovery and of every file that decides
trust (the policy file, the user's state, allowed_signers).

A file or folder may be trusted when it is owned by the user or root and nobody else can write it:
not writable by others, and group-writable only when the group is the owner's user-private group
(umask 002 setups). :func:`unsafe_mode` judges one stat; :func:`path_problem` judges a path the way
the kernel reaches it: the file and every folder a name on the way is looked up in (whoever can write
such a folder can put another file in its place), links followed.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat

_ACCOUNTS = ("/etc/passwd", "/etc/group")
_group_verdicts: dict[tuple[int, int], tuple[tuple[int, ...], str | None]] = {}
#: Links followed on the way to a file before the path is refused (the kernel's own bound).
MAX_LINKS = 40


def unsafe_mode(st: os.stat_result, euid: int) -> str | None:
    """Why a file or folder with this stat may not be trusted, or None. Group-writable is
    accepted only when the group is the owner's user-private group (umask 002 setups)."""
    if st.st_uid not in (euid, 0):
        return f"owned by uid {st.st_uid}, not by the user ({euid}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"writable by others (mode {mode:o})"
    if mode & stat.S_IWGRP:
        why = shared_group(st.st_uid, st.st_gid)
        if why is not None:
            return (
                f"writable by group {why} (mode {mode:o}); group-writable is accepted only when the group "
                "is the owner's private group with no other members"
            )
    return None


def shared_group(uid: int, gid: int) -> str | None:
    """None when ``gid`` is the user-private group of ``uid``: named like the user or the user's
    primary group, with no members but the user and the primary group of no other user. Else the
    group, described for a diagnostic ("staff (gid 50), which has other members: bob"). Answers
    are kept until /etc/passwd or /etc/group change."""
    stamp: list[int] = []
    for path in _ACCOUNTS:
        try:
            stamp.append(os.stat(path).st_mtime_ns)
        except OSError:
            stamp.append(-1)
    key = (uid, gid)
    kept = _group_verdicts.get(key)
    if kept is not None and kept[0] == tuple(stamp):
        return kept[1]
    verdict = _judge_group(uid, gid)
    if len(_group_verdicts) > 1024:
        _group_verdicts.clear()
    _group_verdicts[key] = (tuple(stamp), verdict)
    return verdict


def _judge_group(uid: int, gid: int) -> str | None:
    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return f"gid {gid}, which has no group entry"
    shown = f"{group.gr_name} (gid {gid})"
    try:
        owner = pwd.getpwuid(uid)
    except KeyError:
        return f"{shown}, whose owner uid {uid} has no user entry"
    if group.gr_name != owner.pw_name and gid != owner.pw_gid:
        return f"{shown}, which is not {owner.pw_name}'s own group"
    others = sorted(set(group.gr_mem) - {owner.pw_name})
    try:
        others += sorted({u.pw_name for u in pwd.getpwall() if u.pw_gid == gid and u.pw_uid != uid} - set(others))
    except OSError:
        return f"{shown}, whose members cannot be listed"
    if others:
        listed = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        return f"{shown}, which has other members: {listed}"
    return None


def path_problem(
    path: str | os.PathLike[str], *, euid: int | None = None, home: str | None = None
) -> tuple[str, str] | None:
    """Where and why what ``path`` names may have been changed by another user: ``(the file or
    folder at fault, why)``, or None when nobody but the user and root could have.

    Judged with :func:`unsafe_mode`: the file (or folder) itself and every folder a name on the way
    to it is looked up in, symbolic links followed (each link's own folder is judged too), since
    whoever can write such a folder can put another file in its place. The folders above the
    user's home (``/``, ``/home``) are the system's and are not judged; a path outside the home is
    judged up to below ``/``. A sticky folder of root or the user (``/tmp``) that others may write is
    accepted on the way, since others cannot replace its entries, but the entry looked up in it
    must then be the user's or root's. A name that does not exist ends the walk: nothing is there
    to trust yet (None).
    """
    euid = os.geteuid() if euid is None else euid
    home = os.path.realpath(os.path.expanduser("~")) if home is None else home
    above_home = {"/"}
    folder = os.path.dirname(home)
    while folder not in above_home:
        above_home.add(folder)
        folder = os.path.dirname(folder)
    pending = _names(os.path.abspath(os.fspath(path)))
    current = "/"
    links = 0
    found: os.stat_result | None = None
    try:
        found = os.stat(current)
        while pending:
            name = pending.pop()
            if name == "..":
                current = os.path.dirname(current)
                found = os.stat(current)
                continue
            if not stat.S_ISDIR(found.st_mode):
                return current, "not a folder"
            sticky_shared = False
            if current not in above_home:
                why = unsafe_mode(found, euid)
                if why is not None:
                    if not (found.st_mode & stat.S_ISVTX and found.st_uid in (euid, 0)):
                        return current, why
                    sticky_shared = True
            entry = os.path.join(current, name)
            try:
                found = os.lstat(entry)
            except FileNotFoundError:
                return None
            if sticky_shared and found.st_uid not in (euid, 0):
                return entry, f"owned by uid {found.st_uid} in {current}, a folder others may write"
            if stat.S_ISLNK(found.st_mode):
                links += 1
                if links > MAX_LINKS:
                    return entry, f"more than {MAX_LINKS} symbolic links on the way"
                target = os.readlink(entry)
                pending.extend(_names(target))
                if target.startswith("/"):
                    current = "/"
                found = os.stat(current)
                continue
            current = entry
    except OSError as exc:
        return current, f"cannot be checked ({exc.strerror or exc})"
    why = unsafe_mode(found, euid)
    return (current, why) if why is not None else None


def _names(path: str) -> list[str]:
    """The names of ``path``, last first (a stack to pop), without empty and ``.`` names."""
    return [name for name in reversed(path.split("/")) if name not in ("", ".")]


def refusal(path: str | os.PathLike[str], problem: tuple[str, str], what: str) -> str:
    """The message refusing ``path`` (a ``what``: "policy file", "state folder", ...) for ``problem``
    (from :func:`path_problem`)."""
    at, why = problem
    subject = f"the {what}" if at == os.path.abspath(os.fspath(path)) else f"{at}, on the way to the {what},"
    return (
        f"refused: {subject} is {why}; a file another user could change must never decide what tooldir "
        "trusts (make it yours and not writable by group or others: chown, chmod go-w)"
    )
