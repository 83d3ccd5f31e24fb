"""Strip a checkpoint for release: keep ``state_dict`` and plain ``meta`` only.

    python tools/model_converters/publish_model.py IN OUT.pth [--no-hash]
        [--metafile-entry ENTRY.yml --config CONFIG [--name NAME] [--collection C]
         [--url-prefix URL]]

IN is a path or an http(s) URL: a training checkpoint, a converter's output or an official file.
Writes ``OUT-<first 8 hex digits of its sha256>.pth`` (OpenMMLab's naming; ``OUT.pth`` itself with
``--no-hash``) that ``torch.load(weights_only=True)`` reads with no allowlist at all: optimizer
state, message hubs, ``args`` and other pickled objects are dropped. ``--metafile-entry`` also
writes the file's entry for ``configs/metafile.yml`` (Name, In Collection, Config, Parameters,
Weights, and Converted From with the converter command when IN came from a converter), after
checking that the weights load strictly into CONFIG's model.
"""
import argparse
import hashlib
import os
import os.path as osp

import torch
import yaml

from mmhvit.models.checkpoint import load_checkpoint_file, state_dict_of
from mmhvit.models.checkpoint_url import HASH_SUFFIX
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
    """Write the weights and plain meta of ``in_file`` to ``out_file`` (hash-named); its path."""
    # Weights-only, with the training scripts' harmless types allowed: nothing in IN runs code.
    checkpoint = load_checkpoint_file(in_file)
    meta = checkpoint.get('meta', {}) if isinstance(checkpoint, dict) else {}
    published = dict(state_dict=state_dict_of(checkpoint, in_file), meta=plain(meta) or {})
    stem = out_file[:-len('.pth')] if out_file.endswith('.pth') else out_file
    os.makedirs(osp.dirname(osp.abspath(stem)), exist_ok=True)
    tmp = stem + '.tmp.pth'
    torch.save(published, tmp)
    torch.load(tmp, weights_only=True)  # the release must load with no allowlisted type
    with open(tmp, 'rb') as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    final = f'{stem}-{sha[:8]}.pth' if with_hash else f'{stem}.pth'
    os.replace(tmp, final)
    return final


def count_and_check_params(published: str, config: str) -> int:
    """Parameters of ``config``'s model, after loading the published weights into it strictly."""
    from mmengine.config import Config
    from mmengine.registry import MODELS, init_default_scope
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    if 'init_cfg' in cfg.model.get('backbone', {}):
        cfg.model.backbone.init_cfg = None  # the published weights replace it: no download
    model = MODELS.build(cfg.model)
    state_dict = torch.load(published, map_location='cpu', weights_only=True)['state_dict']
    model.load_state_dict(state_dict, strict=True)
    return sum(p.numel() for p in model.parameters())


def metafile_entry(published: str, config: str, name: str = None, collection: str = None,
                   url_prefix: str = None) -> dict:
    """The ``configs/metafile.yml`` entry of a published file (OpenMMLab's model-index fields).

    Args:
        published: the file :func:`publish` wrote.
        config: the config whose model the weights are for (checked by a strict load).
        name: the model's name; None: the file name without its hash and extension.
        collection: ``In Collection`` (the family); None leaves it out.
        url_prefix: where the file will be downloadable; ``Weights`` is ``URL_PREFIX/FILE``.
    """
    file_name = osp.basename(published)
    meta = torch.load(published, map_location='cpu', weights_only=True)['meta']
    entry = dict(Name=name or HASH_SUFFIX.sub('', file_name)[:-len('.pth')])
    if collection:
        entry['In Collection'] = collection
    entry['Config'] = config
    entry['Metadata'] = dict(Parameters=count_and_check_params(published, config))
    entry['Weights'] = f'{url_prefix.rstrip("/")}/{file_name}' if url_prefix else file_name
    if meta.get('converter'):
        source = meta.get('source_url') or meta.get('source')
        # The command recorded by the converter (``mmhvit convert FAMILY``; a script: with python).
        command = meta['converter']
        command = f'python {command}' if command.endswith('.py') else command
        entry['Converted From'] = dict(Weights=source,
                                       Converter=f'{command} {source} {entry["Name"]}.pth')
    return entry


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Publish a checkpoint for release')
    parser.add_argument('in_file', help='input checkpoint: a path or an http(s) URL')
    parser.add_argument('out_file', help='output checkpoint (the sha256 prefix is appended)')
    parser.add_argument('--no-hash', action='store_true', help='write OUT_FILE as named')
    parser.add_argument('--metafile-entry', help='also write the metafile entry to this .yml')
    parser.add_argument('--config', help='the config the weights are for (with --metafile-entry)')
    parser.add_argument('--name', help='model name in the entry (default: from OUT_FILE)')
    parser.add_argument('--collection', help='In Collection of the entry (the family)')
    parser.add_argument('--url-prefix', help='where the file will be downloadable from')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if args.metafile_entry and not args.config:
        parser.error('--metafile-entry needs --config (the entry names the config and its '
                     'parameter count)')
    if '://' not in args.in_file and not osp.isfile(args.in_file):
        raise FileNotFoundError(f'{args.in_file} does not exist')
    return args


@reports_user_errors
def main(argv=None):
    args = parse_args(argv)
    published = publish(args.in_file, args.out_file, not args.no_hash)
    print(published)
    if args.metafile_entry:
        entry = metafile_entry(published, args.config, args.name, args.collection,
                               args.url_prefix)
        with open(args.metafile_entry, 'w') as f:
            yaml.safe_dump([entry], f, sort_keys=False)
        print(f'metafile entry: {args.metafile_entry}')


if __name__ == '__main__':
    main()
