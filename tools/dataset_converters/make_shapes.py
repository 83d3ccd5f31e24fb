"""Generate the bundled quickstart dataset: coloured shapes for detection, instance segmentation,
semantic segmentation and classification, from one set of seeded scenes.

    python tools/dataset_converters/make_shapes.py [--out data/shapes] [--seed 0]
                                                   [--train 320] [--val 80]

Writes, for each split (``train``, ``val``)::

    OUT/img_dir/SPLIT/*.png                  the scenes (160-256 px), shared by every task
    OUT/annotations/instances_SPLIT.json     COCO boxes + polygon masks of the visible part of
                                             every shape (MMDetection CocoDataset)
    OUT/ann_dir/SPLIT/*.png                  label maps, 0 = background, 1..3 = circle, square,
                                             triangle (MMSegmentation img_dir/ann_dir layout)
    OUT/crops/SPLIT/CLASS/CLASS_*.png        square crops (64-96 px) around one shape with its
                                             context, or of background only (class no_shape),
                                             balanced over the four classes (MMPretrain
                                             CustomDataset, one sub-folder per class)

The same arguments give byte-identical files. An existing dataset made with other arguments is
never overwritten.
"""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np
from mmengine.utils import ProgressBar
from PIL import Image

from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors

CLASSES = ('circle', 'square', 'triangle')
NO_SHAPE = 'no_shape'
CROP_CLASSES = CLASSES + (NO_SHAPE, )
FORMAT_VERSION = 3
MIN_SIDE, MAX_SIDE = 160, 256
MAX_OCCLUDED_FRACTION = 0.3  # keeps every shape recognisable
CROP_MIN_SIDE, CROP_MAX_SIDE = 64, 96  # classification crops are resized to a side in this range
MIN_CROP_AREA = 150  # a shape with fewer visible pixels gives no crop
# A shape crop is kept when its shape owns at least this multiple of the pixels of any other
# shape inside the crop, so that the label is the shape the crop is about.
CROP_DOMINANCE = 2.0
MAX_BACKGROUND_FRACTION = 0.02  # a no_shape crop may touch a shape with this fraction of pixels


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
    """One scene: (uint8 HxWx3 image, int64 HxW owner map, [category id per object]).

    ``owner`` holds, per pixel, the index of the object it shows, or -1 for background.
    """
    height, width = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, size=2))
    image = textured_background(rng, height, width)
    owner = np.full((height, width), -1, dtype=np.int64)
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
    return image, owner, [category for category, _ in objects]


def coco_annotations(owner: np.ndarray, categories, image_id: int, first_id: int):
    annotations = []
    for index, category in enumerate(categories):
        mask = owner == index
        ys, xs = np.nonzero(mask)
        x0, y0 = int(xs.min()), int(ys.min())
        annotations.append(
            dict(id=first_id + index, image_id=image_id, category_id=category + 1,
                 bbox=[x0, y0, int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1],
                 area=int(mask.sum()), segmentation=visible_polygons(mask), iscrowd=0))
    return annotations


def semantic_labels(owner: np.ndarray, categories) -> np.ndarray:
    """uint8 label map: 0 for background, category + 1 where a shape is visible."""
    lookup = np.array([0] + [c + 1 for c in categories], dtype=np.uint8)
    return lookup[owner + 1]


def _square(rng, centre, side, height, width):
    """A square window (y0, x0, side) around ``centre`` with some jitter, inside the image."""
    side = int(min(side, height, width))
    cy, cx = (c + rng.uniform(-0.1, 0.1) * side for c in centre)
    y0 = int(np.clip(round(cy - side / 2), 0, height - side))
    x0 = int(np.clip(round(cx - side / 2), 0, width - side))
    return y0, x0, side


def _resized_crop(rng, image, window) -> np.ndarray:
    y0, x0, side = window
    out_side = int(rng.integers(CROP_MIN_SIDE, CROP_MAX_SIDE + 1))
    crop = image[y0:y0 + side, x0:x0 + side]
    return cv2.resize(crop, (out_side, out_side), interpolation=cv2.INTER_AREA)


def shape_crop(rng, image, owner, index):
    """A crop around object ``index`` with context, or None when another shape dominates it."""
    ys, xs = np.nonzero(owner == index)
    if len(ys) < MIN_CROP_AREA:
        return None
    extent = max(ys.max() - ys.min(), xs.max() - xs.min()) + 1
    centre = ((ys.min() + ys.max()) / 2, (xs.min() + xs.max()) / 2)
    window = _square(rng, centre, max(extent * rng.uniform(1.25, 1.7), 40), *owner.shape)
    y0, x0, side = window
    counts = np.bincount(owner[y0:y0 + side, x0:x0 + side].ravel() + 1)[1:]
    own = counts[index] if index < len(counts) else 0
    others = np.delete(counts, index) if index < len(counts) else counts
    if own == 0 or (len(others) and others.max() * CROP_DOMINANCE > own):
        return None
    return _resized_crop(rng, image, window)


def background_crop(rng, image, owner):
    """A crop that (almost) misses every shape, or None after a few failed tries."""
    height, width = owner.shape
    for _ in range(30):
        side = int(rng.uniform(40, 96))
        centre = (rng.uniform(0, height), rng.uniform(0, width))
        y0, x0, side = _square(rng, centre, side, height, width)
        if (owner[y0:y0 + side, x0:x0 + side] >= 0).mean() <= MAX_BACKGROUND_FRACTION:
            return _resized_crop(rng, image, (y0, x0, side))
    return None


def classification_crops(scenes, rng: np.random.Generator):
    """{class name: [crops]}, balanced: every class gets as many crops as the most frequent shape.

    Each shape gives one crop; the rarer classes are topped up with more crops of their shapes
    (new jitter and size), and no_shape crops are taken from the scenes' background.
    """
    crops = {name: [] for name in CROP_CLASSES}
    sources = {name: [] for name in CLASSES}
    for scene_index, (image, owner, categories) in enumerate(scenes):
        for index, category in enumerate(categories):
            crop = shape_crop(rng, image, owner, index)
            if crop is not None:
                crops[CLASSES[category]].append(crop)
                sources[CLASSES[category]].append((scene_index, index))
    target = max(len(crops[name]) for name in CLASSES)
    for name in CLASSES:
        if not sources[name]:
            raise ValueError(f'no usable {name} in this split: generate more images')
        attempt = 0
        while len(crops[name]) < target:
            scene_index, index = sources[name][attempt % len(sources[name])]
            image, owner, _ = scenes[scene_index]
            crop = shape_crop(rng, image, owner, index)
            if crop is not None:
                crops[name].append(crop)
            attempt += 1
            if attempt > 50 * target:
                raise RuntimeError(f'could not balance the {name} crops')
    attempt = 0
    while len(crops[NO_SHAPE]) < target:
        image, owner, _ = scenes[attempt % len(scenes)]
        crop = background_crop(rng, image, owner)
        if crop is not None:
            crops[NO_SHAPE].append(crop)
        attempt += 1
        if attempt > 50 * target:
            raise RuntimeError('could not find enough background crops')
    return crops


def build_split(out_dir: str, split: str, num_images: int, scene_rng: np.random.Generator,
                crop_rng: np.random.Generator) -> dict:
    for folder in ('img_dir', 'ann_dir'):
        os.makedirs(osp.join(out_dir, folder, split), exist_ok=True)
    images, annotations, scenes = [], [], []
    progress = ProgressBar(num_images)
    for image_id in range(1, num_images + 1):
        image, owner, categories = make_image(scene_rng)
        file_name = f'{image_id:06d}.png'
        Image.fromarray(image).save(osp.join(out_dir, 'img_dir', split, file_name))
        Image.fromarray(semantic_labels(owner, categories), mode='L').save(
            osp.join(out_dir, 'ann_dir', split, file_name))
        images.append(dict(id=image_id, file_name=file_name, height=image.shape[0],
                           width=image.shape[1]))
        annotations += coco_annotations(owner, categories, image_id, len(annotations) + 1)
        scenes.append((image, owner, categories))
        progress.update()
    print()
    for name, crops in classification_crops(scenes, crop_rng).items():
        folder = osp.join(out_dir, 'crops', split, name)
        os.makedirs(folder, exist_ok=True)
        for index, crop in enumerate(crops):
            # the class in the name too: visualisers save by file name, all classes in one folder
            Image.fromarray(crop).save(osp.join(folder, f'{name}_{index:05d}.png'))
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
    # Independent streams per split (the val scenes do not change when --train does), and for
    # the crops (the scenes do not depend on how the crops are drawn).
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    for split, count, scene_rng, crop_rng in (('train', num_train, streams[0], streams[2]),
                                              ('val', num_val, streams[1], streams[3])):
        print(f'generating {count} {split} scenes in {out_dir}')
        coco = build_split(out_dir, split, count, scene_rng, crop_rng)
        with open(osp.join(out_dir, 'annotations', f'instances_{split}.json'), 'w') as f:
            json.dump(coco, f)
    with open(settings_file, 'w') as f:
        json.dump(settings, f)
    return True


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default='data/shapes', help='output folder')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--train', type=int, default=320, help='number of train scenes')
    parser.add_argument('--val', type=int, default=80, help='number of val scenes')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    if args.train < 1 or args.val < 1:
        parser.error('--train and --val must be at least 1')
    generate(args.out, args.seed, args.train, args.val)


if __name__ == '__main__':
    main()
