"""Every Swin model that MMDetection, MMSegmentation and MMPretrain ship, with each of ours.

    python tools/analysis_tools/swin_swap.py [--families TransCNN NesT ...] [--groups NAME ...]
        [--max-classes N] [--max-queries N] [--out PAGE.md]

Finds the installed packages' configs whose model has Swin's backbone (leaving out those that need
a language model or video, saying why), groups them by model structure and, for each group's
representative config and each family, replaces the backbone as a user does (a tiny arch, the
levels Swin gave the model, the necks' / heads' input widths), builds the model, trains one step
on two small synthetic images and predicts. Prints and writes a markdown table, group x family:
``ok`` or the one-line error (``as shipped:`` when the packaged config fails whatever the
backbone). The models run as shipped unless ``--max-classes`` / ``--max-queries`` lower those
counts. ``--out`` replaces the part of PAGE.md between the two marker lines (or writes a new
file with the tables only).
"""
import argparse
import os.path as osp
import sys
import time

from mmhvit.analysis.swin_swap import discover, group_models
from mmhvit.analysis.swin_swap_run import one_line, run_swap
from mmhvit.testing import FAMILIES
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors

BEGIN = '<!-- swin_swap.py table: begin -->'
END = '<!-- swin_swap.py table: end -->'


def run_group(group, families, caps) -> dict:
    """{family: 'ok' or the one-line error}, and {'keys': the keys the swap set}."""
    cells, fault = {'keys': ''}, group.fault()
    for family in families:
        start = time.time()
        try:
            result = run_swap(group.representative, family, caps=caps)
            cells[family] = 'ok'
            cells['keys'] = cells['keys'] or ', '.join(f'`{k}`' for k in result['changes'])
        except Exception as error:  # a cell of the table: the error is the result
            cells[family] = f'as shipped: {fault}' if fault else one_line(error)
        print(f'{group.name:60s} {family:10s} {cells[family]} ({time.time() - start:.0f} s)',
              flush=True)
    return cells


def _cell(text: str) -> str:
    return text.replace('|', '\\|')


def tables(groups, results, families, skipped) -> str:
    """The markdown the tool writes: the matrix, each group's structure and keys, the configs left
    out."""
    lines = ['| group | configs | representative | ' + ' | '.join(families) + ' |',
             '|---|---|---|' + '---|' * len(families)]
    for group in groups:
        cells = results[group.name]
        lines.append(f'| {group.name} | {len(group.models)} | '
                     f'`{group.representative.name}` | '
                     + ' | '.join(_cell(cells[f]) for f in families) + ' |')
    lines += ['', '| group | structure (Swin levels -> necks -> heads) | keys the swap sets '
              'besides `model.backbone` |', '|---|---|---|']
    for group in groups:
        lines.append(f'| {group.name} | {_cell(group.structure)} | '
                     f'{results[group.name]["keys"] or "-"} |')
    lines += ['', '<details><summary>The configs of each group</summary>', '']
    for group in groups:
        lines.append(f'- {group.name}: ' + ', '.join(f'`{m.name}`' for m in group.models))
    lines += ['', '</details>', '', '<details><summary>The Swin configs left out '
              f'({len(skipped)})</summary>', '']
    lines += [f'- `{name}`: {reason}' for name, reason in sorted(skipped.items())]
    lines += ['', '</details>']
    return '\n'.join(lines) + '\n'


def write_page(path: str, text: str) -> None:
    """Replace the text between the markers of ``path``, or write a new file."""
    if osp.exists(path):
        page = open(path, encoding='utf-8').read()
        if BEGIN not in page or END not in page:
            raise ValueError(f'{path} exists without the marker lines {BEGIN!r} / {END!r}; '
                             f'add them where the table goes, or give a new file')
        text = page[:page.index(BEGIN)] + f'{BEGIN}\n{text}' + page[page.index(END):]
    else:
        text = f'{BEGIN}\n{text}{END}\n'
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument('--groups', nargs='+', help='group names (default: all)')
    parser.add_argument('--max-classes', type=int, help='lower every num_classes above this')
    parser.add_argument('--max-queries', type=int, help='lower every num_queries above this')
    parser.add_argument('--out', help='the markdown page to write the tables to')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    found, skipped = discover()
    groups = group_models(found)
    if args.groups:
        unknown = sorted(set(args.groups) - {g.name for g in groups})
        if unknown:
            raise ValueError(f'unknown group(s) {unknown}; the groups: '
                             f'{[g.name for g in groups]}')
        groups = [g for g in groups if g.name in args.groups]
    caps = {key: value for key, value in (('num_classes', args.max_classes),
                                          ('num_queries', args.max_queries)) if value}
    print(f'{len(found)} Swin configs in {len(groups)} groups; {len(skipped)} left out')
    results = {group.name: run_group(group, args.families, caps) for group in groups}
    text = tables(groups, results, args.families, skipped)
    sys.stdout.write('\n' + text)
    if args.out:
        write_page(args.out, text)


if __name__ == '__main__':
    main()
