// Package nocloud renders the identity of a deployed machine as a cloud-init
// NoCloud seed, and writes that seed as the small vfat filesystem labelled
// CIDATA that the deploy environment puts in a partition at the end of the
// target disk.
//
// Why this datasource and this place (docs/ARCHITECTURE.md, "The datasource
// of a deployed OS"):
//
//   - Stock cloud-init finds a filesystem labelled CIDATA (or cidata) on any
//     local disk by itself (its ds-identify and the NoCloud datasource look
//     for the label), so a vendor's cloud image works unchanged: nothing is
//     injected into its root filesystem and, after deployment, the machine
//     boots its own GRUB with its own kernel command line.
//   - Nothing is served by MAC or source address: the seed travels inside
//     the deploy environment's authenticated download and lives only on the
//     machine's own disk, so no other machine and no anonymous caller on the
//     rack network can read its user-data.
//   - The partition sits at the very end of the disk, after the image's own
//     partitions, so cloud-init's growpart grows the root partition up to it
//     (a config drive placed right after the root would stop that growth).
//
// Render is pure: it validates its inputs and returns the four files;
// Seed.Image lays them out as a deterministic FAT12 filesystem. Neither
// knows the store: the caller gathers the machine's addresses, keys and
// credentials.
//
// What rackd adds to the user's configuration is in vendor-data, never in
// user-data: cloud-init merges user-data over vendor-data, so where both set
// a key the user's value wins and the sub-keys the user leaves out come
// from rackd's. A user's own manage_etc_hosts replaces rackd's; a
// reporting handler under another name runs beside rackd's webhook; but a
// user's phone_home url replaces rackd's report URL, and vendor_data:
// {enabled: false} drops rackd's vendor-data altogether: rackd then never
// hears that the OS came up (its webhook still reports the stages in the
// first case), and the deployment times out.
package nocloud
