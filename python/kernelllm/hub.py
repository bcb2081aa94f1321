"""Downloads a model from the Hugging Face Hub into the standard HF cache, with huggingface_hub.

Only the files kernelllm's engine reads are fetched: config.json, generation_config.json, the
tokenizer files, kernelllm.py (its PROMPT_TEMPLATE), and the weights: the shards that
model.safetensors.index.json names, else model.safetensors. Settings are huggingface_hub's
own: HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_HUB_DISABLE_PROGRESS_BARS.

    python3 -m kernelllm.hub download facebook/KernelLLM [--revision REV]

prints the snapshot directory on stdout; the progress bar and errors go to stderr. The
`kernelllm` CLI runs this file by its path (it imports nothing from the package) when --model
names an HF id that is not complete in the cache; with --json the last stdout line is
{"path": DIR} or {"error": MESSAGE, "kind": KIND}.

A download that stops halfway leaves a snapshot without the files that did not arrive (and
perhaps huggingface_hub's partial blob, *.incomplete): kernelllm never uses such a snapshot
(missing_files), and the next download fetches only what is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import List, Optional

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Everything but the weights, fetched first: a snapshot holding a shard then also holds the
# index that names the others, so a cut-off download is always seen as incomplete.
METADATA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "kernelllm.py", INDEX)

_ID_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_REPO_ID = re.compile(f"{_ID_PART}/{_ID_PART}")


class HubError(OSError):
    """A model that could not be had from the Hub. `kind` says why: not_found (no such repository
    or revision), gated (no access), unreachable (no connection), incomplete (the transfer was
    cut off), offline, unsupported (the repository is not a checkpoint the engine loads),
    invalid (a malformed id or revision), missing_library (no huggingface_hub), failed (other)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


def is_repo_id(name: str) -> bool:
    """Whether `name` has the form org/name (what kernelllm downloads when it is not cached)."""
    return bool(_REPO_ID.fullmatch(name))


def offline_requested(flag: bool = False) -> bool:
    """`flag`, or HF_HUB_OFFLINE set to a true value as huggingface_hub reads it."""
    return bool(flag) or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _shards(snapshot: str) -> List[str]:
    """The shard file names that the snapshot's model.safetensors.index.json names."""
    path = os.path.join(snapshot, INDEX)
    try:
        with open(path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise HubError(f"{path}: expected a JSON object with a \"weight_map\" of shard file names ({e})",
                       "unsupported") from None
    for shard in shards:
        if not isinstance(shard, str) or not shard or os.path.basename(shard) != shard or shard in (".", ".."):
            raise HubError(f"{path}: expected plain shard file names in \"weight_map\", found {shard!r}", "unsupported")
    return shards


def missing_files(snapshot: str) -> List[str]:
    """What a checkpoint directory lacks for the engine (the C++ loader's rule,
    kernelllm::missing_model_files): config.json, tokenizer.json and the weights. Empty:
    complete. A link to a blob that is not there counts as missing."""
    missing = [name for name in ("config.json", "tokenizer.json") if not os.path.isfile(os.path.join(snapshot, name))]
    if os.path.isfile(os.path.join(snapshot, INDEX)):
        try:
            shards = _shards(snapshot)
        except HubError as e:
            return missing + [f"{INDEX} (unreadable: {e})"]
        missing += [f"{s} (named by {INDEX})" for s in shards if not os.path.isfile(os.path.join(snapshot, s))]
    elif not os.path.isfile(os.path.join(snapshot, SINGLE)):
        missing.append(f"{SINGLE} (or {INDEX} and its shards)")
    return missing


def _chain(error: BaseException) -> List[BaseException]:
    seen: List[BaseException] = []
    e: Optional[BaseException] = error
    while e is not None and all(e is not s for s in seen):
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _has_token() -> bool:
    try:
        from huggingface_hub import get_token

        return bool(get_token())
    except Exception:  # an old huggingface_hub, an unreadable token file
        return bool(os.environ.get("HF_TOKEN"))


def _explain(error: Exception, repo_id: str, revision: Optional[str], endpoint: str) -> HubError:
    """One clear message for what huggingface_hub raised (its class names differ across versions
    and HTTP libraries, so the cause chain is matched by name)."""
    chain = _chain(error)
    names = set()
    for e in chain:
        names.update(c.__name__ for c in type(e).__mro__)
    text = " ".join(str(e) for e in chain)
    where = f"{endpoint.rstrip('/')}/{repo_id}"
    rev = revision or "main"
    if "GatedRepoError" in names:
        if _has_token():
            return HubError(f"{repo_id} is a gated repository and the token in use (HF_TOKEN, or the one `hf auth login` "
                            f"stored) has no access to it: accept its conditions at {where} with that account", "gated")
        return HubError(f"{repo_id} is a gated repository: accept its conditions at {where}, then give kernelllm "
                        f"your token: set HF_TOKEN (a read token from {endpoint.rstrip('/')}/settings/tokens) or run "
                        f"`hf auth login`", "gated")
    if "RevisionNotFoundError" in names:
        return HubError(f"{repo_id} has no revision \"{rev}\" at {endpoint} (expected a branch, tag or commit hash)",
                        "not_found")
    if "RepositoryNotFoundError" in names:
        return HubError(f"repository {repo_id} not found at {endpoint} (a private repository looks the same without a "
                        f"token that can read it: set HF_TOKEN)", "not_found")
    if "OfflineModeIsEnabled" in names or (
            "LocalEntryNotFoundError" in names and ("HF_HUB_OFFLINE" in text or "local_files_only" in text)):
        return HubError(f"{repo_id} is not complete in the HF cache and downloads are off (HF_HUB_OFFLINE)", "offline")
    cut = ("RemoteProtocolError", "ChunkedEncodingError", "IncompleteRead", "ProtocolError", "ReadError")
    if any(n in names for n in cut) or "Consistency check failed" in text:
        return HubError(f"the download of {repo_id} from {endpoint} was cut off before it finished "
                        f"({type(chain[-1]).__name__}: {chain[-1]}); what arrived stays in the HF cache, the incomplete "
                        f"snapshot is never used as a model, and the next online run fetches only what is missing",
                        "incomplete")
    unreachable = ("ConnectError", "ConnectionError", "ConnectTimeout", "TimeoutException", "Timeout",
                   "NewConnectionError", "ConnectionRefusedError", "gaierror")
    if any(n in names for n in unreachable):
        cause = next((e for e in reversed(chain) if {c.__name__ for c in type(e).__mro__} & set(unreachable)),
                     chain[-1])
        return HubError(f"cannot reach the Hugging Face Hub at {endpoint} to download {repo_id} "
                        f"({type(cause).__name__}: {cause}); check the network and HF_ENDPOINT, or use a model "
                        f"already in the HF cache", "unreachable")
    if "HFValidationError" in names:
        return HubError(f"{repo_id}: {error}", "invalid")
    if "HfHubHTTPError" in names:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return HubError(f"the Hub at {endpoint} refused the download of {repo_id}: {first_line}", "failed")
    return HubError(f"downloading {repo_id} from {endpoint} failed: {type(error).__name__}: {error}", "failed")


def download(repo_id: str, revision: Optional[str] = None) -> str:
    """Downloads what the engine needs of `repo_id` (at `revision`: a branch, tag or commit;
    default main) into the HF cache and returns the snapshot directory. Files already cached are
    not fetched again; a partial one is resumed. Raises HubError with a message fit for the user."""
    if not is_repo_id(repo_id):
        raise HubError(f"expected an HF id of the form org/name, found {repo_id!r}", "invalid")
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError as e:
        raise HubError(f"downloading {repo_id} needs the huggingface_hub package, which {sys.executable} cannot "
                       f"import ({e}): `{sys.executable} -m pip install huggingface_hub`, or fetch the model with "
                       f"`hf download {repo_id}` elsewhere", "missing_library") from None
    endpoint = constants.ENDPOINT
    print(f"kernelllm: downloading {repo_id} (revision {revision or 'main'}) from {endpoint} into "
          f"{constants.HF_HUB_CACHE}", file=sys.stderr, flush=True)
    common = dict(library_name="kernelllm")
    try:
        first = snapshot_download(repo_id, revision=revision, allow_patterns=list(METADATA_FILES), **common)
        commit = os.path.basename(os.path.normpath(first))
        weights = _shards(first) if os.path.isfile(os.path.join(first, INDEX)) else [SINGLE]
        # The commit the first call resolved: both calls fetch the same revision of the repository.
        snapshot = snapshot_download(repo_id, revision=commit, allow_patterns=weights, **common)
    except HubError:
        raise
    except Exception as e:  # huggingface_hub's and its HTTP library's errors, OSError for a full disk, ...
        raise _explain(e, repo_id, revision, endpoint) from None
    missing = missing_files(snapshot)
    if missing:
        raise HubError(f"{repo_id} (commit {commit}) at {endpoint} has no {', '.join(missing)}: kernelllm's engine "
                       f"loads a checkpoint with config.json, tokenizer.json and safetensors weights", "unsupported")
    return snapshot


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kernelllm.hub", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="download the files the engine needs into the HF cache; print the snapshot path")
    dl.add_argument("repo_id", help="org/name, e.g. facebook/KernelLLM")
    dl.add_argument("--revision", default=None, help="branch, tag or commit hash (default main)")
    dl.add_argument("--json", action="store_true", help="last stdout line: {\"path\": ...} or {\"error\": ..., \"kind\": ...}")
    args = ap.parse_args(argv)

    out = sys.stdout
    if args.json:
        sys.stdout = sys.stderr  # whatever else prints goes beside the progress bar, not into the reply
    try:
        path = download(args.repo_id, args.revision)
        reply, code = {"path": path}, 0
    except HubError as e:
        reply, code = {"error": str(e), "kind": e.kind}, 1
    except KeyboardInterrupt:
        reply, code = {"error": f"the download of {args.repo_id} was interrupted; the next one resumes it",
                       "kind": "interrupted"}, 130
    finally:
        sys.stdout = out
    if args.json:
        print(json.dumps(reply), flush=True)
    elif code == 0:
        print(reply["path"], flush=True)
    else:
        print(f"kernelllm: error: {reply['error']}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
