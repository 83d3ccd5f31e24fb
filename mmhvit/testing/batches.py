"""Synthetic batches for a loss or predict step of an OpenMMLab model (two images and their
annotations), as ``mmdet.testing.demo_mm_inputs`` is for MMDetection alone."""
import copy

import torch


def detection_sample(height: int, width: int, with_mask: bool):
    """An MMDet ``DetDataSample`` with two boxes (and their masks)."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         scale_factor=(1., 1.), pad_shape=(height, width)))
    boxes = torch.tensor([[10., 12., 70., 80.], [40., 30., 110., 100.]])
    instances = InstanceData(bboxes=boxes, labels=torch.tensor([0, 1]))
    if with_mask:
        masks = torch.zeros(2, height, width, dtype=torch.uint8)
        for mask, (x0, y0, x1, y1) in zip(masks, boxes.int().tolist()):
            mask[y0:y1, x0:x1] = 1
        instances.masks = BitmapMasks(masks.numpy(), height, width)
    sample.gt_instances = instances
    return sample


def segmentation_sample(height: int, width: int, num_classes: int):
    """An MMSeg ``SegDataSample`` with a random label map."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    sample = SegDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         pad_shape=(height, width)))
    sample.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, height, width)))
    return sample


def classification_sample():
    """An MMPretrain ``DataSample`` of class 3."""
    from mmpretrain.structures import DataSample
    return DataSample().set_gt_label(torch.tensor([3]))


def make_batch(scope: str, cfg, height: int, width: int) -> dict:
    """Two random uint8 images and their samples for the model of ``cfg`` in ``scope`` ('mmdet',
    'mmseg' or 'mmpretrain'): what its ``data_preprocessor`` takes."""
    if scope == 'mmdet':
        with_mask = ('mask_head' in cfg.model.get('roi_head', {})
                     or cfg.model.type == 'Mask2Former')
        sample = detection_sample(height, width, with_mask)
    elif scope == 'mmseg':
        sample = segmentation_sample(height, width, cfg.model.decode_head.num_classes)
    else:
        sample = classification_sample()
    # two images: batch statistics (BN in UperNet's pooling branch) need more than one value
    images = [torch.randint(0, 256, (3, height, width), dtype=torch.uint8) for _ in range(2)]
    return dict(inputs=images, data_samples=[sample, copy.deepcopy(sample)])
