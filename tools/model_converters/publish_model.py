"""Strip a training checkpoint for release: keep ``state_dict`` and plain ``meta`` only.

    python tools/model_converters/publish_model.py IN.pth OUT.pth [--no-hash]

Writes ``OUT-<first 8 hex digits of sha256>.pth`` (``OUT.pth`` itself with ``--no-hash``),
loadable with ``torch.load(weights_only=True)`` (optimizer state, message hubs and other pickled
objects are dropped).
"""
import argparse
import hashlib
import os
import os.path as osp

import torch

from mmhvit.models.checkpoint import load_checkpoint_file
from mmhvit.utils import add_debug_argument, reports_user_errors


def plain(value):
    """Keep what ``weights_only`` unpickling accepts: containers of numbers, strings and tensors."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items() if plain(v) is not None}
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return type(value)(v for v in items if v is not None)
    if isinstance(value, (str, int, float, bool, torch.Tensor)):
        return value
    return None


def publish(in_file: str, out_file: str, with_hash: bool = True) -> str:
    # Weights-only, with MMEngine's training-log types allowed: nothing in the file runs code.
    checkpoint = load_checkpoint_file(in_file)
    state_dict = checkpoint.get('state_dict', checkpoint)
    published = dict(state_dict=state_dict, meta=plain(checkpoint.get('meta', {})) or {})
    stem = out_file[:-len('.pth')] if out_file.endswith('.pth') else out_file
    tmp = stem + '.tmp.pth'
    torch.save(published, tmp)
    with open(tmp, 'rb') as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    final = f'{stem}-{sha[:8]}.pth' if with_hash else f'{stem}.pth'
    os.replace(tmp, final)
    return final


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='Publish a checkpoint for release')
    parser.add_argument('in_file', help='input checkpoint')
    parser.add_argument('out_file', help='output checkpoint (the sha256 prefix is appended)')
    parser.add_argument('--no-hash', action='store_true', help='write OUT_FILE as named')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if not osp.isfile(args.in_file):
        raise FileNotFoundError(f'{args.in_file} does not exist')
    print(publish(args.in_file, args.out_file, not args.no_hash))


if __name__ == '__main__':
    main()
