from .inference import infer_image, task_of

__all__ = ['infer_image', 'task_of']
