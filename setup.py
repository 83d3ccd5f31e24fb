import os
import os.path as osp
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = osp.dirname(osp.abspath(__file__))
# What an installed package carries under mmhvit/.mim, as OpenMMLab packages do (mim and the
# `mmhvit` console command look there): repository path -> path under .mim.
MIM_FILES = {
    'configs': 'configs',  # incl. configs/quickstart and configs/metafile.yml
    'model-index.yml': 'model-index.yml',
    'tools': 'tools',
    'demo': 'demo',
}
# Repository-only scripts (they install into, and write beside, a source checkout).
MIM_SKIP = ('setup_env.sh', 'build_progress.py', 'run_tests.sh', 'quickstart.sh', '__pycache__',
            '*.pyc')


def read_version():
    namespace = {}
    with open(osp.join(HERE, 'mmhvit', 'version.py')) as f:
        exec(f.read(), namespace)
    return namespace['__version__']


class BuildPyWithMim(build_py):
    """Copies the configs, model index, tools and demo into the built package's ``.mim``.

    A build step instead of a committed copy (mmdet's ``add_mim_extension`` does the same at build
    time). An editable install reads the repository's own files instead (``mmhvit.mim``).
    """

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            return
        target = osp.join(self.build_lib, 'mmhvit', '.mim')
        if osp.isdir(target):
            shutil.rmtree(target)  # no stale configs from an earlier build
        for src, dst in MIM_FILES.items():
            src, dst = osp.join(HERE, src), osp.join(target, dst)
            if not osp.exists(src):
                raise FileNotFoundError(f'{src} is missing: the package would ship without it')
            os.makedirs(osp.dirname(dst), exist_ok=True)
            if osp.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*MIM_SKIP))
            else:
                shutil.copyfile(src, dst)


setup(
    name='mmhvit',
    version=read_version(),
    description='Nested / hierarchical vision transformers (TransCNN, NesT, TNT) '
    'as OpenMMLab backbones',
    long_description=open(osp.join(HERE, 'README.md'), encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('configs', 'tools', 'tests', 'demo')),
    cmdclass={'build_py': BuildPyWithMim},
    entry_points={'console_scripts': ['mmhvit = mmhvit.cli:main']},
    python_requires='>=3.8',
    # mmcv is left out on purpose (as mmdet does): a plain pip install must never trigger a
    # silent build of mmcv without its ops. tools/setup_env.sh installs it properly.
    install_requires=['torch>=2.1', 'mmengine>=0.10.0'],
    extras_require={
        'mm': ['mmdet>=3.3.0', 'mmsegmentation>=1.2.2', 'mmpretrain>=1.2.0', 'ftfy', 'regex'],
        'tests': ['pytest', 'timm==1.0.31', 'safetensors', 'build'],
    },
    license='Apache-2.0',
    zip_safe=False,
)
