from setuptools import find_packages, setup


def read_version():
    namespace = {}
    with open('mmhvit/version.py') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


setup(
    name='mmhvit',
    version=read_version(),
    description='Nested / hierarchical vision transformers (TransCNN, NesT, TNT) '
    'as OpenMMLab backbones',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('configs', 'tools', 'tests')),
    python_requires='>=3.8',
    # mmcv is left out on purpose (as mmdet does): a plain pip install must never trigger a
    # silent build of mmcv without its ops. tools/setup_env.sh installs it properly.
    install_requires=['torch>=2.1', 'mmengine>=0.10.0'],
    extras_require={
        'mm': ['mmdet>=3.3.0', 'mmsegmentation>=1.2.2', 'mmpretrain>=1.2.0', 'ftfy', 'regex'],
        'tests': ['pytest', 'timm', 'safetensors'],
    },
    license='Apache License 2.0',
    zip_safe=False,
)
