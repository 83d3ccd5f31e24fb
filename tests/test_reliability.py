"""Hostile checkpoints and inputs, masked attention in half precision, bf16 autocast per family.

The figures of docs/reliability.md come from these tests (run with ``-s`` to see them printed).
"""
import os
import pickle
import subprocess
import sys

import pytest
import torch
from conftest import DETECTOR_CONFIGS, REPO, run_tool, short_run_options

from mmhvit.models.backbones import TransCNN
from mmhvit.models.checkpoint import read_state_dict
from mmhvit.models.converters.files import convert_file
from mmhvit.models.layers import multihead_attention
from mmhvit.testing import FAMILIES, TINY_ARCHS, CodeRunner, random_state_dict, transcnn_shapes

pytestmark = pytest.mark.integration

NAMES = sorted(FAMILIES)


def build(name, **kwargs):
    torch.manual_seed(0)
    model = FAMILIES[name](**{**TINY_ARCHS[name], 'drop_path_rate': 0., **kwargs})
    model.init_weights()
    return model.eval()


@pytest.fixture
def hostile_files(tmp_path):
    """name -> (path, error type, message pattern) for every kind of bad file."""
    marker = tmp_path / 'code_ran'
    good = tmp_path / 'good.pth'
    torch.save({'w': torch.randn(64, 64)}, good)
    data = good.read_bytes()
    files = {
        'code-running pickle': ({'state_dict': {'w': torch.ones(1)},
                                 'payload': CodeRunner(marker)}, pickle.UnpicklingError,
                                'refused to load checkpoint .*could run code'),
        'empty file': (b'', ValueError, 'is empty'),
        'truncated file': (data[:len(data) // 2], ValueError, 'corrupt or truncated'),
        'corrupt bytes': (data[:200] + bytes(400) + data[600:], ValueError, 'corrupt'),
        'text file': (b'model weights: see README', ValueError, 'not a checkpoint'),
        'no tensors': ({'epoch': 3}, ValueError, 'holds no tensors'),
    }
    paths = {}
    for name, (content, error, pattern) in files.items():
        path = tmp_path / (name.replace(' ', '_').replace('-', '_') + '.pth')
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save(content, path)
        paths[name] = (str(path), error, pattern)
    return paths, marker


def test_every_bad_file_gets_one_clear_error(hostile_files, capsys):
    paths, marker = hostile_files
    model = build('TransCNN')
    for name, (path, error, pattern) in paths.items():
        # the three in-process loading paths: reading, init_cfg Pretrained, a converter
        for load in (lambda: read_state_dict(path),
                     lambda: model.load_pretrained(path),
                     lambda: convert_file('transcnn', path, path + '.out')):
            with pytest.raises(error, match=pattern) as info:
                load()
            assert path in str(info.value), (name, str(info.value))
        with capsys.disabled():
            print(f'\n[reliability] {name}: {type(info.value).__name__}: '
                  f'{str(info.value).splitlines()[0][:160]}')
    assert not marker.exists(), 'a checkpoint ran code while being loaded'


def test_test_tool_refuses_a_code_running_checkpoint(hostile_files, tiny_shapes, tmp_path):
    paths, marker = hostile_files
    path = paths['code-running pickle'][0]
    out = run_tool('tools/test.py', DETECTOR_CONFIGS['retinanet'], path, '--work-dir',
                   str(tmp_path / 'work'), '--cfg-options', *short_run_options(tiny_shapes),
                   check=False)
    # the runner's log lines, then one line for the refused file (no traceback)
    assert out.strip().splitlines()[-1].startswith(f'error: refused to load checkpoint {path}')
    assert 'Weights only load failed' in out and 'Traceback' not in out
    assert not marker.exists(), 'tools/test.py ran code from a checkpoint'


# --- a user's mistake is one line -----------------------------------------------------------
def run_script(*args):
    """(exit status, output lines) of a script run as a user runs it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get('PYTHONPATH', '')]))
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)
    return proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()


def test_checkpoint_scripts_answer_a_bad_file_with_one_line(hostile_files, tmp_path):
    paths, marker = hostile_files
    hostile = paths['code-running pickle'][0]
    dst = tmp_path / 'out.pth'
    status, lines = run_script('tools/model_converters/transcnn2mmhvit.py', hostile, str(dst))
    assert status != 0 and len(lines) == 1, lines
    assert lines[0].startswith(f'error: refused to load checkpoint {hostile}')
    nest = tmp_path / 'nest.pth'
    torch.save(build('NesT').state_dict(), nest)
    status, lines = run_script('tools/model_converters/tnt2mmhvit.py', str(nest), str(dst))
    assert status != 0 and len(lines) == 1, lines
    assert lines[0].startswith(f'error: {nest}: not a TNT checkpoint of a known layout')
    status, lines = run_script('tools/model_converters/publish_model.py', hostile, str(dst))
    assert status != 0 and len(lines) == 1, lines
    assert lines[0].startswith(f'error: refused to load checkpoint {hostile}')
    assert not marker.exists() and not dst.exists()
    # --debug: the traceback, for a bug report
    status, lines = run_script('tools/model_converters/tnt2mmhvit.py', str(nest), str(dst),
                               '--debug')
    assert status != 0 and lines[0].startswith('Traceback') and lines[-1].startswith('ValueError')


@pytest.mark.parametrize('family, source, message', [
    ('transcnn', 'code-running pickle', 'refused to load checkpoint {path}: it pickles Python'),
    ('hatnet', 'no tensors', 'checkpoint {path} holds no tensors'),
    ('nest', 'TransCNN', '{path} is not a NesT checkpoint'),
    ('hatnet', 'TransCNN', '{path}: this is a TransCNN checkpoint, not a HAT-Net one'),
    ('transcnn', 'NesT', '{path} does not have the official TransCNN layout'),
    ('tnt', 'missing', 'checkpoint {path} does not exist'),
])
def test_convert_command_answers_a_users_mistake_with_one_line(family, source, message,
                                                               hostile_files, tmp_path, capsys):
    from mmhvit.cli import main
    paths, marker = hostile_files
    path = paths[source][0] if source in paths else str(tmp_path / f'{source}.pth')
    if source == 'TransCNN':
        official = transcnn_shapes(TransCNN.arch_zoo['tiny'])
        torch.save(random_state_dict(official, dtype=torch.float32), path)
    elif source == 'NesT':
        torch.save(build('NesT').state_dict(), path)
    dst = tmp_path / 'out.pth'
    with pytest.raises(SystemExit) as exit_info:
        main(['convert', family, path, str(dst)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 1 and not out
    assert len(err.splitlines()) == 1 and err.startswith('error: ' + message.format(path=path))
    assert not marker.exists() and not dst.exists()


def test_demo_answers_a_non_finite_image_with_one_line(tmp_path, capsys):
    cv2 = pytest.importorskip('cv2')
    import numpy as np

    from mmhvit.cli import main
    pixels = np.full((8, 8, 3), np.nan, dtype=np.float32)
    image = str(tmp_path / 'nan.tiff')
    assert cv2.imwrite(image, pixels)
    with pytest.raises(SystemExit) as exit_info:
        main(['demo', image, 'configs/quickstart/classifier_transcnn-q_20e_shapes.py'])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert err.splitlines() == [f'error: image {image} has 192 NaN or Inf values (of 192); the '
                                'model needs finite pixels']


def test_checkpoint_of_another_family_or_arch(tmp_path):
    nest = tmp_path / 'nest.pth'
    torch.save({'state_dict': build('NesT').state_dict()}, nest)
    with pytest.raises(ValueError, match=f'{nest} is not a TransCNN checkpoint'):
        build('TransCNN').load_pretrained(str(nest))
    small = tmp_path / 'tnt_other_arch.pth'
    other_arch = dict(TINY_ARCHS['TNT']['arch'], embed_dims=32)
    torch.save(build('TNT', arch=other_arch).state_dict(), small)
    with pytest.raises(ValueError, match=f'{small} was made for TNT arch .* but this model is'):
        build('TNT').load_pretrained(str(small))


def test_converters_read_safetensors_like_pth(tmp_path):
    from safetensors.torch import save_file
    official = random_state_dict(transcnn_shapes(TransCNN.arch_zoo['tiny']), dtype=torch.float32)
    torch.save(official, tmp_path / 'official.pth')
    save_file({k: v.contiguous() for k, v in official.items()}, tmp_path / 'official.safetensors')
    for suffix in ('pth', 'safetensors'):
        convert_file('transcnn', str(tmp_path / f'official.{suffix}'),
                     str(tmp_path / f'{suffix}.out'))
    from_pth = torch.load(tmp_path / 'pth.out', weights_only=True)['state_dict']
    from_safetensors = torch.load(tmp_path / 'safetensors.out', weights_only=True)['state_dict']
    assert from_pth.keys() == from_safetensors.keys() and len(from_pth) > 100
    assert all(torch.equal(from_pth[k], from_safetensors[k]) for k in from_pth)
    bad = tmp_path / 'bad.safetensors'
    bad.write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": 1}')
    with pytest.raises(ValueError, match=f'{bad} is not a valid .safetensors file'):
        read_state_dict(str(bad))


# --- inputs ----------------------------------------------------------------------------------
@pytest.mark.parametrize('name', NAMES)
def test_bad_inputs_get_clear_errors(name):
    model = build(name)
    cases = [
        (torch.randn(1, 4, 32, 32), ValueError, 'built for 3 input channels, got 4'),
        (torch.randn(3, 32, 32), ValueError, 'expects an NCHW batch tensor, got \\(3, 32, 32\\)'),
        (torch.randint(0, 255, (1, 3, 32, 32), dtype=torch.uint8), TypeError,
         'floating-point image tensor.*torch.uint8'),
        (torch.zeros(1, 3, 32, 32, dtype=torch.int64), TypeError, 'torch.int64'),
    ]
    for x, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            model(x)


@pytest.mark.parametrize('name', NAMES)
def test_forward_never_reads_the_input_values(name, monkeypatch):
    """The input checks look at metadata only: a value check (isfinite, any, item) would
    synchronise the host with a GPU on every forward."""
    model = build(name)

    def synchronising(*args, **kwargs):
        raise AssertionError('the forward read tensor values on the host')

    for function in ('isfinite', 'isnan', 'isinf'):
        monkeypatch.setattr(torch, function, synchronising)
    monkeypatch.setattr(torch.Tensor, 'item', synchronising)
    monkeypatch.setattr(torch.Tensor, '__bool__', synchronising)
    nan = torch.randn(1, 3, 32, 32)
    nan[0, 1, 5, 7] = float('nan')
    with torch.no_grad():
        outputs = model(nan)  # a NaN image is the caller's to check (check_image_file)
    assert len(outputs) == 4


def test_a_non_finite_image_gets_one_clear_error_where_it_enters(tmp_path):
    cv2 = pytest.importorskip('cv2')
    import numpy as np

    from mmhvit.apis import check_image_file, infer_image
    pixels = np.random.default_rng(0).random((16, 24, 3), dtype=np.float32)
    assert cv2.imwrite(str(tmp_path / 'fine.tiff'), pixels)
    assert check_image_file(str(tmp_path / 'fine.tiff')).dtype == np.float32
    pixels[3, 5, 1], pixels[0, 0, 0] = np.nan, np.inf
    image = str(tmp_path / 'nan.tiff')
    assert cv2.imwrite(image, pixels)
    with pytest.raises(ValueError, match=f'image {image} has 2 NaN or Inf values'):
        check_image_file(image)
    # the demo's API checks before it builds anything (the config is never read)
    with pytest.raises(ValueError, match='NaN or Inf'):
        infer_image(image, str(tmp_path / 'no_config.py'))
    (tmp_path / 'text.png').write_text('not an image')
    with pytest.raises(ValueError, match='not an image that OpenCV can read'):
        check_image_file(str(tmp_path / 'text.png'))


# --- masked attention in half precision ------------------------------------------------------
@pytest.mark.parametrize('kernel', ['matmul', 'sdpa'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16])
def test_masked_attention_is_finite_and_ignores_padding(kernel, dtype):
    torch.manual_seed(0)
    groups, tokens, channels = 3, 16, 32
    q, k, v = (2 * torch.randn(2 * groups, tokens, channels) for _ in range(3))
    key_mask = torch.ones(groups, tokens, dtype=torch.bool)
    key_mask[1, 10:] = False  # a partially padded group
    key_mask[2] = False  # a group made only of padding
    out = multihead_attention(*(t.to(dtype) for t in (q, k, v)), 4, key_mask=key_mask,
                              kernel=kernel)
    assert torch.isfinite(out).all()
    # the partially padded group equals attention over its valid keys alone
    valid = multihead_attention(q[1::3], k[1::3, :10], v[1::3, :10], 4)
    tol = dict(rtol=0, atol=1e-4) if dtype == torch.float32 else dict(rtol=0.1, atol=1.5)
    torch.testing.assert_close(out[1::3].float(), valid, **tol)


def test_matmul_attention_masks_with_a_finite_value(monkeypatch):
    """The mask fills logits with the dtype's finite minimum, never -inf."""
    seen = []
    original = torch.Tensor.masked_fill

    def spy(self, mask, value):
        seen.append(value)
        return original(self, mask, value)

    monkeypatch.setattr(torch.Tensor, 'masked_fill', spy)
    q = torch.randn(2, 5, 8, dtype=torch.float16)
    key_mask = torch.tensor([[True, True, True, False, False]])
    multihead_attention(q, q, q, 2, key_mask=key_mask, kernel='matmul')
    assert seen == [torch.finfo(torch.float16).min]


# --- bf16 autocast ---------------------------------------------------------------------------
@pytest.mark.parametrize('name', NAMES)
def test_bf16_autocast_close_to_fp32(name, capsys):
    model = build(name)
    x = torch.randn(2, 3, 70, 90)
    with torch.no_grad():
        reference = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            half = model(x)
    errors = []
    for out, ref in zip(half, reference):
        assert out.shape == ref.shape and torch.isfinite(out).all()
        errors.append(((out.float() - ref).norm() / ref.norm()).item())
    with capsys.disabled():
        print(f'\n[reliability] {name} bf16 autocast relative error per output: '
              + ', '.join(f'{e:.2e}' for e in errors))
    assert max(errors) < 2e-2, errors
