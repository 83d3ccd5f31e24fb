"""Checkpoint URLs: downloaded once into torch's hub cache, checked against their name's hash.

Nothing here reads the downloaded file: :func:`mmhvit.models.checkpoint.load_checkpoint_file`
reads it as it reads any local path (weights-only), so that a URL can never run code that the same
file on disk could not.
"""
import hashlib
import os
import os.path as osp
import re
import uuid
from http.client import HTTPException
from typing import Optional
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlparse

import torch
from mmengine.dist import get_dist_info
from mmengine.logging import print_log

URL_PREFIXES = ('http://', 'https://')
# torch.hub's naming convention (``name-<first 8 or more hex digits of the SHA-256>.ext``); unlike
# torch's own pattern, only the hex run right before the extension counts (OpenMMLab names hold
# other dashes, e.g. ``..._20200130-c2398f9e.pth``).
HASH_SUFFIX = re.compile(r'-([0-9a-f]{8,64})(?=\.[^-]*$)')


class CheckpointDownloadError(RuntimeError):
    """A checkpoint URL could not be fetched (no network, unknown host, HTTP error)."""


class CheckpointHashError(ValueError):
    """A checkpoint's SHA-256 does not start with the hex digits its file name promises."""


def is_url(filename) -> bool:
    """Whether ``filename`` is an ``http(s)://`` URL (the schemes this module downloads)."""
    return isinstance(filename, str) and filename.startswith(URL_PREFIXES)


def hub_checkpoint_dir() -> str:
    """torch's checkpoint cache, ``torch.hub.get_dir()/checkpoints`` (``$TORCH_HOME`` moves it)."""
    return osp.join(torch.hub.get_dir(), 'checkpoints')


def url_file_name(url: str) -> str:
    """The cache file name of ``url``: the last part of its path (query and fragment dropped)."""
    name = osp.basename(unquote(urlparse(url).path))
    if not name or name in ('.', '..'):
        raise ValueError(f'checkpoint URL {url} does not end in a file name')
    return name


def expected_hash_prefix(name: str) -> Optional[str]:
    """The hex digits of a ``-<hex>`` suffix before the extension of ``name``, or None."""
    match = HASH_SUFFIX.search(name)
    return match.group(1) if match else None


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def check_hash(path: str, url: str, cached: bool = False) -> None:
    """Raise :class:`CheckpointHashError` when ``path``'s SHA-256 does not start with the hash
    suffix of ``url``'s file name (names without one are not checked)."""
    expected = expected_hash_prefix(url_file_name(url))
    if expected is None:
        return
    actual = sha256_of(path)
    if not actual.startswith(expected):
        where = (f'the cached copy {path} (delete it to download it again)' if cached else
                 'the downloaded file (not kept)')
        raise CheckpointHashError(
            f'checkpoint {url}: its name promises a SHA-256 starting with {expected}, but '
            f'{where} has SHA-256 {actual} ({actual[:len(expected)]}...). The file is not the '
            'one the name was made for (a corrupt or replaced download). If the name merely '
            'ends in hex digits, download the file yourself and pass its local path.')


def _download_error(url: str, path: str, error: Exception) -> CheckpointDownloadError:
    if isinstance(error, HTTPError):  # the server answered: the URL is wrong, not the network
        return CheckpointDownloadError(
            f'could not download checkpoint {url}: the server answered {error}; check the URL '
            '(the configs name the release files in docs/model_zoo.md).')
    reason = error.reason if isinstance(error, URLError) else error
    return CheckpointDownloadError(
        f'could not download checkpoint {url} ({type(error).__name__}: {reason}). On a machine '
        f'without network access, download the file elsewhere (e.g. `wget {url}`), copy it here '
        'and give its local path instead of the URL (init_cfg checkpoint=..., load_from, or the '
        f'tool argument), or copy it to {path}, which is used without downloading.')


def _download_once(url: str, model_dir: Optional[str], progress: bool) -> str:
    path = osp.join(model_dir or hub_checkpoint_dir(), url_file_name(url))
    if osp.isfile(path):
        check_hash(path, url, cached=True)
        return path
    os.makedirs(osp.dirname(path), exist_ok=True)
    # A unique temporary name: ranks or processes downloading at once never see a partial file.
    tmp = f'{path}.{uuid.uuid4().hex}.partial'
    print_log(f'Downloading checkpoint {url} to {path}', logger='current')
    try:
        torch.hub.download_url_to_file(url, tmp, hash_prefix=None, progress=progress)
        check_hash(tmp, url)
        os.replace(tmp, path)
    except (OSError, HTTPException) as error:
        raise _download_error(url, path, error) from None
    finally:
        if osp.exists(tmp):
            os.remove(tmp)
    return path


def download_checkpoint(url: str, model_dir: Optional[str] = None,
                        progress: Optional[bool] = None) -> str:
    """The local copy of checkpoint ``url``, downloaded into the cache unless already there.

    A ``-<hex>`` suffix of the file name (``name-1a2b3c4d.pth``) is checked against the file's
    SHA-256, for a new download and for a cached copy. Under ``torch.distributed`` rank 0 downloads
    while the other ranks wait, as MMEngine's URL loader does.

    Args:
        url: an ``http://`` or ``https://`` URL.
        model_dir: the cache directory; None: ``torch.hub.get_dir()/checkpoints``.
        progress: draw a progress bar; None: when stdin is a terminal.

    Returns:
        The path of the cached file.

    Raises:
        CheckpointDownloadError: the URL cannot be fetched (the message says how to work offline).
        CheckpointHashError: the file does not have the SHA-256 its name promises.
    """
    if not is_url(url):
        raise ValueError(f'not an http(s) URL: {url}')
    progress = os.isatty(0) if progress is None else progress
    rank, world_size = get_dist_info()
    if world_size == 1:
        return _download_once(url, model_dir, progress)
    path, failure = None, None
    if rank == 0:
        try:
            path = _download_once(url, model_dir, progress)
        except Exception as error:  # noqa: BLE001  re-raised below, after the barrier
            failure = error
    # Every rank reaches the barrier, also when rank 0 failed: nobody waits forever.
    torch.distributed.barrier()
    if failure is not None:
        raise failure
    return path if rank == 0 else _download_once(url, model_dir, progress)
