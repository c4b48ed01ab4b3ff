# Merges an instance's cloud-config files (CLOUD_DIR/instance/cloud-config.txt,
# the user's, and vendor-cloud-config.txt, the vendor's) the way cloud-init's
# modules see them, and prints the result as JSON.
# Usage: python3 merge_config.py CLOUD_DIR
import json
import sys

from cloudinit import helpers

paths = helpers.Paths({"cloud_dir": sys.argv[1]})
merger = helpers.ConfigMerger(paths=paths, include_vendor=True)
print(json.dumps(merger.cfg, default=str))
