import hashlib
import json

import numpy as np
import pytest
from conftest import run_tool
from PIL import Image

pytestmark = pytest.mark.integration

GENERATOR = 'tools/dataset_converters/make_shapes.py'


def digest(folder):
    files = sorted(p for p in folder.rglob('*') if p.is_file())
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_same_seed_gives_same_files(tmp_path, tiny_shapes):
    again = tmp_path / 'again'
    run_tool(GENERATOR, '--out', str(again), '--train', '8', '--val', '4', '--seed', '1')
    assert digest(again) == digest(tiny_shapes)
    other = tmp_path / 'other'
    run_tool(GENERATOR, '--out', str(other), '--train', '8', '--val', '4', '--seed', '2')
    assert digest(other) != digest(tiny_shapes)


def test_refuses_to_overwrite_a_different_dataset(tiny_shapes):
    before = digest(tiny_shapes)
    out = run_tool(GENERATOR, '--out', str(tiny_shapes), '--train', '9', '--val', '4', '--seed',
                   '1', check=False)
    assert out.strip().startswith('error: ') and len(out.strip().splitlines()) == 1, out
    assert 'refusing to overwrite' in out
    out = run_tool(GENERATOR, '--out', str(tiny_shapes), '--train', '8', '--val', '4', '--seed',
                   '1')
    assert 'already holds this dataset' in out
    assert digest(tiny_shapes) == before


@pytest.mark.parametrize('split', ['train', 'val'])
def test_annotations_are_valid_coco(tiny_shapes, split):
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO
    ann_file = tiny_shapes / 'annotations' / f'instances_{split}.json'
    coco = COCO(str(ann_file))
    names = [c['name'] for c in coco.loadCats(coco.getCatIds())]
    assert {'circle', 'square', 'triangle'} <= set(names)
    assert len(coco.getImgIds()) == (8 if split == 'train' else 4)
    assert len(coco.getAnnIds()) >= len(coco.getImgIds())
    for image_id in coco.getImgIds():
        info = coco.loadImgs(image_id)[0]
        image = Image.open(tiny_shapes / 'img_dir' / split / info['file_name'])
        assert image.size == (info['width'], info['height'])
        assert 128 <= min(image.size) and max(image.size) <= 256
        for ann in coco.loadAnns(coco.getAnnIds(imgIds=image_id)):
            assert ann['category_id'] in coco.getCatIds()
            x, y, w, h = ann['bbox']
            assert x >= 0 and y >= 0 and w > 0 and h > 0
            assert x + w <= info['width'] and y + h <= info['height']
            mask = coco.annToMask(ann).astype(bool)
            ys, xs = np.nonzero(mask)
            assert len(ys) > 0
            # the polygon mask lies inside its box (one pixel of rasterisation slack)
            assert xs.min() >= x - 1 and xs.max() <= x + w and ys.min() >= y - 1
            assert ys.max() <= y + h
            rle = mask_utils.frPyObjects(ann['segmentation'], info['height'], info['width'])
            assert mask_utils.area(mask_utils.merge(rle)) == pytest.approx(ann['area'], rel=0.25)
    with open(ann_file) as f:
        assert json.load(f)['categories'][0]['id'] == 1
