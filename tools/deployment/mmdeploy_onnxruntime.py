"""MMDeploy 1.3.1: a detector config to an ONNX Runtime end2end model (boxes after NMS), then its
test-set metrics through MMDeploy's ONNX Runtime backend.

    .venv-deploy/bin/python tools/deployment/mmdeploy_onnxruntime.py CONFIG CHECKPOINT
        [--work-dir DIR] [--image IMG]

Run it in the environment of tools/deployment/setup_deploy_env.sh. It makes the calls of
MMDeploy's ``tools/deploy.py`` (``torch2onnx``) and ``tools/test.py`` (task processor, backend
model, test runner), which the PyPI wheel does not ship, with MMDeploy's
``detection_onnxruntime_dynamic`` deploy config. torch >= 2.9 exports with the dynamo exporter by
default, which MMDeploy 1.3.1 does not know (its rewrites hook the TorchScript exporter, and its
``dynamic_axes`` fail ``torch.export``); ``torch.onnx.export`` is therefore called with
``dynamo=False`` here.
"""
import argparse
import functools
import os.path as osp
import sys

import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)

from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors  # noqa: E402

DEPLOY_CFG = dict(
    onnx_config=dict(type='onnx', export_params=True, keep_initializers_as_inputs=False,
                     opset_version=11, save_file='end2end.onnx', input_names=['input'],
                     output_names=['dets', 'labels'], input_shape=None, optimize=True,
                     dynamic_axes=dict(input={0: 'batch', 2: 'height', 3: 'width'},
                                       dets={0: 'batch', 1: 'num_dets'},
                                       labels={0: 'batch', 1: 'num_dets'})),
    codebase_config=dict(type='mmdet', task='ObjectDetection', model_type='end2end',
                         post_processing=dict(score_threshold=0.05, confidence_threshold=0.005,
                                              iou_threshold=0.5, max_output_boxes_per_class=200,
                                              pre_top_k=5000, keep_top_k=100,
                                              background_label_id=-1)),
    backend_config=dict(type='onnxruntime'))


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='MMDeploy ONNX Runtime export and test')
    parser.add_argument('config')
    parser.add_argument('checkpoint', help='weights only (e.g. a quickstart weights.pth)')
    parser.add_argument('--work-dir', default='work_dirs/mmdeploy')
    parser.add_argument('--image', default='data/shapes/img_dir/val/000001.png',
                        help='the example image the export traces')
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)

    from mmdeploy.apis import torch2onnx
    from mmdeploy.apis.utils import build_task_processor
    from mmdeploy.utils import load_config
    from mmengine import Config

    import mmhvit  # noqa: F401  (registers the backbones)

    deploy_cfg = Config(DEPLOY_CFG)
    torch2onnx(args.image, args.work_dir, 'end2end.onnx', deploy_cfg, args.config,
               args.checkpoint, device='cpu')
    deploy_cfg, model_cfg = load_config(deploy_cfg, args.config)
    model_cfg.work_dir = args.work_dir
    processor = build_task_processor(model_cfg, deploy_cfg, 'cpu')
    model = processor.build_backend_model([osp.join(args.work_dir, 'end2end.onnx')],
                                          processor.update_data_preprocessor)
    runner = processor.build_test_runner(model, args.work_dir, log_file=None, show=False,
                                         show_dir=None, wait_time=0, interval=1,
                                         dataloader=model_cfg.test_dataloader)
    print('MMDeploy ONNX Runtime metrics:', runner.test())


if __name__ == '__main__':
    main()
