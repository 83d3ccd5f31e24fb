import functools
import http.server
import os.path as osp
import subprocess
import sys
import threading

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_tool(*args, timeout=600, env=None, check=True):
    """Run a repository script with this interpreter, as a user would; returns stdout + stderr."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)
    output = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f'{args} exited with {proc.returncode}:\n{output[-6000:]}')
    return output


@pytest.fixture(scope='session')
def tiny_shapes(tmp_path_factory):
    """A tiny generated shapes dataset, every layout (8 train, 4 val scenes)."""
    out = tmp_path_factory.mktemp('data') / 'shapes'
    run_tool('tools/dataset_converters/make_shapes.py', '--out', str(out), '--train', '8',
             '--val', '4', '--seed', '1')
    return out


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory and records the path of every GET (the test counts downloads)."""

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


class ServedFiles:
    """Files under ``root`` served at ``base`` (a release page stand-in), and torch's hub cache."""

    def __init__(self, root, base, requests, cache_dir):
        self.root, self.base, self.requests, self.cache_dir = root, base, requests, cache_dir

    def put(self, name, content):
        """Serve ``content`` (bytes, or an object to ``torch.save``) as ``name``; its URL."""
        import torch
        path = self.root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save(content, path)
        return self.url(name)

    def url(self, name):
        return f'{self.base}/{name}'

    def count(self, name):
        return sum(1 for path in self.requests if path.split('?')[0] == f'/{name}')


@pytest.fixture
def release_server(tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 serving a fresh directory, with ``TORCH_HOME`` (hence the hub
    cache, ``torch.hub.get_dir()/checkpoints``) in a fresh directory of the test, also for the
    tools it starts."""
    root = tmp_path / 'release'
    root.mkdir()
    handler = functools.partial(_CountingHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    try:
        yield ServedFiles(root, f'http://127.0.0.1:{server.server_port}', server.requests,
                          tmp_path / 'torch_home' / 'hub' / 'checkpoints')
    finally:
        server.shutdown()
        server.server_close()


# CPU-sized variants of every backbone, for tests that exercise the plumbing rather than an arch
# (every stage has blocks, and windows / blocks are small enough to need padding at odd sizes).
TINY_BACKBONES = {
    'TransCNN': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                               num_heads=[1, 1, 2, 2], mlp_ratio=[2, 2, 2, 2],
                               grid_sizes=[4, 4, 4, 1], ds_ratios=[4, 2, 2, 1])),
    'HATNet': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                             num_heads=[1, 1, 2, 2], mlp_ratio=[2, 2, 2, 2],
                             grid_sizes=[4, 3, 3, 1], ds_ratios=[4, 2, 2, 1])),
    'NesT': dict(arch=dict(embed_dims=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                           num_heads=[1, 2, 2, 4], block_size=4), pretrain_img_size=64),
    'TNT': dict(arch=dict(embed_dims=16, inner_dims=4, depths=[1, 1, 1, 1], num_heads=2,
                          inner_num_heads=1), pretrain_img_size=64),
    # 8-channel words: the word merges normalise each word over its channels, and with 2-4 of
    # them bf16 autocast's rounding grows to 2-5% of the outputs (1% here).
    'PyramidTNT': dict(arch=dict(embed_dims=[16, 32, 64, 64], inner_dims=[8, 8, 16, 16],
                                 depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
                                 inner_num_heads=[1, 1, 2, 2]), pretrain_img_size=64),
}


def poison_padding(monkeypatch, value=1e3):
    """Make every ``pad_nhwc`` of the package fill its padding with ``value`` instead of zeros;
    returns a list that counts the padding calls (a test can check that padding happened)."""
    import sys

    from mmhvit.models.layers import windows
    original = windows.pad_nhwc
    calls = []

    def pad_with_garbage(x, pad_h, pad_w):
        out = original(x, pad_h, pad_w)
        if pad_h or pad_w:
            calls.append((pad_h, pad_w))
            out = out.clone()
            out[:, x.shape[1]:] = value
            out[:, :, x.shape[2]:] = value
        return out

    for name, module in list(sys.modules.items()):
        if name.startswith('mmhvit') and getattr(module, 'pad_nhwc', None) is original:
            monkeypatch.setattr(module, 'pad_nhwc', pad_with_garbage)
    return calls
