"""Generate the bundled quickstart dataset: coloured shapes in COCO detection + instance format.

    python tools/dataset_converters/make_shapes_coco.py [--out data/shapes] [--seed 0]
                                                        [--train 320] [--val 80]

Writes ``OUT/{train,val}/*.png`` and ``OUT/annotations/instances_{train,val}.json`` (boxes and
polygon masks of the visible part of every shape). The same arguments give byte-identical files.
An existing dataset made with other arguments is never overwritten.
"""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np
from mmengine.utils import ProgressBar
from PIL import Image

CLASSES = ('circle', 'square', 'triangle')
FORMAT_VERSION = 1
MIN_SIDE, MAX_SIDE = 160, 256
MAX_OCCLUDED_FRACTION = 0.3  # keeps every shape recognisable


def textured_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Smooth colour blobs, stripes and pixel noise, so shapes are not found by colour alone."""
    coarse = rng.uniform(40, 200, size=(rng.integers(3, 7), rng.integers(3, 7), 3))
    image = cv2.resize(coarse.astype(np.float32), (width, height), interpolation=cv2.INTER_CUBIC)
    period = rng.uniform(6, 20)
    angle = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[:height, :width]
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
    image += stripes[..., None] * rng.uniform(5, 20)
    image += rng.normal(0, rng.uniform(4, 14), size=image.shape)
    return image


def shape_polygon(rng: np.random.Generator, category: str, cx: float, cy: float,
                  radius: float) -> np.ndarray:
    """Vertices (N, 2) of a shape with a random rotation."""
    rotation = rng.uniform(0, 2 * np.pi)
    sides = {'circle': 48, 'square': 4, 'triangle': 3}[category]
    angles = rotation + np.arange(sides) * 2 * np.pi / sides
    return np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], axis=1)


def visible_polygons(mask: np.ndarray):
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL,
                                   cv2.CHAIN_APPROX_SIMPLE)
    return [c.reshape(-1).astype(float).tolist() for c in contours if len(c) >= 3]


def make_image(rng: np.random.Generator):
    """One image and its objects: (uint8 HxWx3, [(category_id, visible bool mask)])."""
    height, width = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, size=2))
    image = textured_background(rng, height, width)
    owner = np.full((height, width), -1, dtype=np.int64)  # which object each pixel shows
    objects = []
    for _ in range(int(rng.integers(1, 6))):
        for _attempt in range(20):
            category = int(rng.integers(len(CLASSES)))
            radius = rng.uniform(12, min(height, width) / 4)
            cx, cy = rng.uniform(radius, width - radius), rng.uniform(radius, height - radius)
            polygon = shape_polygon(rng, CLASSES[category], cx, cy, radius)
            full = np.zeros((height, width), np.uint8)
            cv2.fillPoly(full, [np.round(polygon).astype(np.int32)], 1)
            full = full.astype(bool)
            # Reject a placement that would hide too much of an earlier shape.
            hides_too_much = any(
                (full & (owner == i)).sum() > MAX_OCCLUDED_FRACTION * area
                for i, (_, area) in enumerate(objects))
            if not hides_too_much:
                break
        else:
            continue
        colour = rng.uniform(0, 255, size=3)
        image[full] = colour + rng.normal(0, 6, size=(int(full.sum()), 3))
        owner[full] = len(objects)
        objects.append((category, int(full.sum())))
    image = np.clip(image, 0, 255).astype(np.uint8)
    return image, [(category, owner == i) for i, (category, _) in enumerate(objects)]


def build_split(out_dir: str, split: str, num_images: int, rng: np.random.Generator) -> dict:
    os.makedirs(osp.join(out_dir, split), exist_ok=True)
    images, annotations = [], []
    progress = ProgressBar(num_images)
    for image_id in range(1, num_images + 1):
        image, objects = make_image(rng)
        file_name = f'{image_id:06d}.png'
        Image.fromarray(image).save(osp.join(out_dir, split, file_name))
        images.append(dict(id=image_id, file_name=file_name, height=image.shape[0],
                           width=image.shape[1]))
        for category, mask in objects:
            ys, xs = np.nonzero(mask)
            x0, y0 = int(xs.min()), int(ys.min())
            annotations.append(
                dict(id=len(annotations) + 1, image_id=image_id, category_id=category + 1,
                     bbox=[x0, y0, int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1],
                     area=int(mask.sum()), segmentation=visible_polygons(mask), iscrowd=0))
        progress.update()
    print()
    return dict(images=images, annotations=annotations,
                categories=[dict(id=i + 1, name=name) for i, name in enumerate(CLASSES)])


def generate(out_dir: str, seed: int = 0, num_train: int = 320, num_val: int = 80) -> bool:
    """Write the dataset; returns False when the same dataset is already there."""
    settings = dict(format_version=FORMAT_VERSION, seed=seed, train=num_train, val=num_val,
                    classes=list(CLASSES))
    settings_file = osp.join(out_dir, 'settings.json')
    if osp.exists(settings_file):
        with open(settings_file) as f:
            existing = json.load(f)
        if existing == settings:
            print(f'{out_dir} already holds this dataset ({settings}); nothing to do')
            return False
        raise FileExistsError(f'{out_dir} holds a different dataset ({existing}); refusing to '
                              f'overwrite it with {settings}: choose another --out or delete it')
    if osp.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f'{out_dir} exists and is not a dataset made by this tool; refusing '
                              'to write into it')
    os.makedirs(osp.join(out_dir, 'annotations'), exist_ok=True)
    # Independent streams per split: the val images do not change when --train does.
    train_rng, val_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    for split, count, rng in (('train', num_train, train_rng), ('val', num_val, val_rng)):
        print(f'generating {count} {split} images in {out_dir}/{split}')
        coco = build_split(out_dir, split, count, rng)
        with open(osp.join(out_dir, 'annotations', f'instances_{split}.json'), 'w') as f:
            json.dump(coco, f)
    with open(settings_file, 'w') as f:
        json.dump(settings, f)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default='data/shapes', help='output folder')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--train', type=int, default=320, help='number of train images')
    parser.add_argument('--val', type=int, default=80, help='number of val images')
    args = parser.parse_args()
    if args.train < 1 or args.val < 1:
        parser.error('--train and --val must be at least 1')
    generate(args.out, args.seed, args.train, args.val)


if __name__ == '__main__':
    main()
