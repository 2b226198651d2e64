"""Package layout only (metadata is in pyproject.toml): ship the top-level `conf/` as `zoo.conf`, so
`zoo.build("name")` finds the preset YAML files after a plain, non-editable install."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["zoo", "zoo.*"]) + ["zoo.conf"],
    package_dir={"zoo.conf": "conf"},
    package_data={"zoo.conf": ["*/*.yaml", "*.yaml"],
                  "zoo.inspection.explorer": ["*.html", "*.js", "*.css"]},  # the explorer page's template
)
