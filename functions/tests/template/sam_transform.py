"""Offline AWS SAM transform: template.yaml -> plain CloudFormation JSON, for cfn-lint.

Usage: sam_transform.py TEMPLATE OUT_JSON

Runs aws-sam-translator locally with no AWS calls: local CodeUri folders are replaced by an S3
location, as `sam package` does after uploading; managed policy names are not resolved (the
template uses inline statements only); the region is fixed. The output depends only on the input.
"""

import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class NoManagedPolicies:
    """Managed policy loader that knows none (the template names none)."""

    def load(self):
        return {}


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        template = yaml_parse(f.read())
    for name, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        code = props.get("CodeUri")
        if resource.get("Type") == "AWS::Serverless::Function" and isinstance(code, str):
            if not code.startswith("s3://"):
                props["CodeUri"] = f"s3://tuneplane-artifacts/{name}.zip"
    output = transform(template, {}, NoManagedPolicies())
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(output, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
