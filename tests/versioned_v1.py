"""The old code of tests/versioned_workflows.py: deploy_demo version 1 only."""

from tests.versioned_workflows import deploy_demo

deploy_demo_v1 = deploy_demo("1")
