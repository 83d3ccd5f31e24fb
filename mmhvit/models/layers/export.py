"""Whether a model is being traced for ONNX export.

While it is (:func:`is_exporting`), sizes are traced values: the layers then never branch on them
(a Python ``if`` would freeze the traced size's branch into the graph) and avoid what ONNX engines
take badly (-inf, ceil-mode pooling), so one exported graph serves every input size.
"""
import torch


def is_exporting() -> bool:
    """Whether this call runs inside ``torch.onnx.export`` (its tracing included).

    Checked per call by the layers that take an export-friendly form (no branch on sizes,
    no -inf, no ceil-mode pooling); eager and ``torch.compile`` runs keep their own form, and so
    does a plain ``torch.jit.trace`` (the FLOP counter traces, and must see SDPA calls).
    """
    return torch.onnx.is_in_onnx_export()
