"""The new code of tests/versioned_workflows.py: deploy_demo version 2 only."""

from tests.versioned_workflows import deploy_demo

deploy_demo_v2 = deploy_demo("2")
