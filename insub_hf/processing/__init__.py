"""Processing images: the image processor (torchvision and PIL backends), what an image must be, and the pipelines that
read images at their real range."""
