import os.path as osp
import subprocess
import sys

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


# CPU-sized variants of every backbone, for tests that exercise the plumbing rather than an arch.
TINY_BACKBONES = {
    'TransCNN': dict(arch=dict(embed_dims=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                               num_heads=[1, 1, 2, 2], expansions=[2, 2, 2, 2],
                               grid_sizes=[8, 8, 8, 1], ds_ratios=[8, 4, 2, 1])),
    'NesT': dict(arch=dict(embed_dims=[16, 32, 64], depths=[1, 1, 1], num_heads=[1, 2, 2])),
    'TNT': dict(arch=dict(embed_dims_inner=8, embed_dims_outer=32, num_layers=4,
                          num_heads_inner=2, num_heads_outer=2), out_blocks=(1, 2, 3, 4)),
}
