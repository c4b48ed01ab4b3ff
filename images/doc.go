// Package images will hold the content-addressed store of boot artefacts
// (kernels, initrds, bootloaders). See DESIGN.md section 5; not built yet.
package images
