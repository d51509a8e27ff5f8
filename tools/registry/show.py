"""`show`: every artifact's versions, newest first, with their stages, registration date,
headline metric and data version (read back from the tag message register wrote), in one table.
"""
from tools.registry.message import parse


def rows(repo: str = ".") -> list[dict]:
    """One row per registered version of every artifact GTO knows in repo (a path or URL)."""
    from gto.api import show
    from gto.exceptions import GTOException

    from tools.registry.safety import check_registry, gto_versions, unreadable

    check_registry(repo)
    try:
        names = sorted(show(repo, table=False))
    except GTOException as exc:
        raise unreadable(repo, exc) from None
    except Exception as exc:  # noqa: BLE001 - scmrepo's SCMError: a tag at a missing commit
        if type(exc).__module__.split(".")[0] != "scmrepo":
            raise
        raise unreadable(repo, exc) from None
    out = []
    for name in names:
        for v in gto_versions(repo, name):
            if not v.get("registrations"):  # a commit GTO only discovered, never tagged
                continue
            facts = parse(v["registrations"][-1].get("message", ""))
            out.append({
                "artifact": name, "version": v["version"],
                "stages": sorted(s["stage"] for s in v.get("stages", []) if s.get("is_active")),
                "date": v["created_at"].strftime("%Y-%m-%d %H:%M"),
                "headline": facts.get("headline", ""), "data": facts.get("data", ""),
                "commit": v["commit_hexsha"]})
    return out


def table(found: list[dict]) -> str:
    """The rows as a plain text table (hashes cut to 12 characters, the commit to 8)."""
    head = ("artifact", "version", "stage", "date", "headline", "data", "commit")
    lines = [head] + [(r["artifact"], r["version"], ",".join(r["stages"]) or "-", r["date"],
                       r["headline"] or "-", (r["data"] or "-")[:12], r["commit"][:8])
                      for r in found]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in lines)
