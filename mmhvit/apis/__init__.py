from .inference import check_image_file, infer_image, task_of

__all__ = ['check_image_file', 'infer_image', 'task_of']
