# Reads a NoCloud seed directory (CLOUD_DIR/seed/nocloud) with cloud-init's
# own NoCloud datasource and prints what it found as JSON. Given HOSTS, it
# also runs cloud-init's update_etc_hosts module on that file with the
# seed's vendor-data as the configuration.
# Usage: python3 nocloud_datasource.py CLOUD_DIR [HOSTS]
import json
import logging
import sys

from cloudinit import cloud, distros, helpers, util
from cloudinit.config import cc_update_etc_hosts
from cloudinit.sources import DataSourceNoCloud

cloud_dir = sys.argv[1]
paths = helpers.Paths({"cloud_dir": cloud_dir, "run_dir": cloud_dir + "/run"})
distro = distros.fetch("debian")("debian", {}, paths)
# No fs_label: look only at the seed directory, never at the host's disks.
ds = DataSourceNoCloud.DataSourceNoCloud(
    {"datasource": {"NoCloud": {"fs_label": None}}}, distro, paths
)
if not ds.get_data():
    sys.exit("the NoCloud datasource found no seed in " + cloud_dir)


def text(b):
    return b.decode() if isinstance(b, bytes) else b


host = ds.get_hostname(fqdn=True)
out = {
    "instance_id": ds.get_instance_id(),
    "hostname": getattr(host, "hostname", host),
    "public_keys": ds.get_public_ssh_keys(),
    "userdata_raw": text(ds.get_userdata_raw()),
    "vendordata_raw": text(ds.get_vendordata_raw()),
    "network_config": ds.network_config,
}
if len(sys.argv) > 2:
    cfg = util.load_yaml(text(ds.get_vendordata_raw()))
    distro.hosts_fn = sys.argv[2]
    c = cloud.Cloud(ds, paths, cfg, distro, None)
    short, fqdn, _ = util.get_hostname_fqdn(cfg, c)
    out["short_hostname"], out["fqdn"] = short, fqdn
    cc_update_etc_hosts.handle("update_etc_hosts", cfg, c, logging.getLogger(), [])
    out["hosts"] = util.load_file(sys.argv[2])
print(json.dumps(out))
