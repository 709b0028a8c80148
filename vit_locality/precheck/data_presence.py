"""Whether a run could read its data set, answered before anything is made and without torch: present, or
downloadable (a data.root that can be made, with `ask_servers` a server that answers); else one line, exit 2."""

from __future__ import annotations

import functools
import os
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from vit_locality.datasets import spec_of
from vit_locality.errors import ConfigError, first_line
from vit_locality.precheck.command_line import directory_problem

REACH_TIMEOUT_S = 5.0  # a server that has not answered a HEAD request by then counts as unreachable


def check_data_present(data: Any, ask_servers: bool) -> None:
    """ConfigError when the data set can be neither read nor extracted and download is off, or would fail at once;
    never a skip when the data set declares nothing, or downloads an archive it does not declare. `data`: the data
    section (typed, or as composed)."""
    spec = spec_of(str(data.name), getattr(data, "module", None))
    if spec.archives is None and getattr(data, "root", None) is None:
        return  # a generated set
    archive = spec.archive()
    root = Path(os.path.expanduser(str(data.root)))
    if (root / archive.folder).exists() or (root / archive.filename).is_file():
        return  # present (whether it is complete and sound is the data module's to say, naming the file)
    missing = f"{data.name} is not in data.root={root} (no {archive.folder}/ nor {archive.filename})"
    by_hand = f"fetch {archive.url} into {root}/ by hand, or set data.root to where the data set is"
    if not getattr(data, "download", False):
        raise ConfigError(f"{missing} and data.download=false; {by_hand}")
    problem = directory_problem(root)
    if problem is not None:
        raise ConfigError(f"{missing} and data.root={str(data.root)!r} cannot hold a download ({problem}); {by_hand}")
    unreachable = unreachable_reason(archive.url) if ask_servers else None
    if unreachable is not None:
        host = urllib.parse.urlsplit(archive.url).hostname
        raise ConfigError(f"{missing} and {host} cannot be reached to download it ({unreachable}); {by_hand}")


@functools.lru_cache(maxsize=8)
def unreachable_reason(url: str) -> str | None:
    """Why `url`'s server gives no answer, or None when it answers (any HTTP status: what the download then finds is
    its to say). A HEAD request through urllib, the download's own client, so the environment's proxies apply; run
    in a thread, as a name lookup has no timeout of its own."""
    import urllib.error
    import urllib.request  # here: 50 ms the pre-check of a command with its data present does not pay

    found: list[str | None] = []

    def ask() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=REACH_TIMEOUT_S).close()
            found.append(None)
        except urllib.error.HTTPError:
            found.append(None)  # the server answered
        except (OSError, ValueError) as error:
            reason = getattr(error, "reason", None)
            found.append(first_line(reason) if isinstance(reason, BaseException) else first_line(error))

    asker = threading.Thread(target=ask, daemon=True, name="data-server-check")
    asker.start()
    asker.join(REACH_TIMEOUT_S + 1)
    return found[0] if found else f"no answer within {REACH_TIMEOUT_S:.0f} s"
