"""``tf.contrib.image``: ``transform``, ``translate``, ``rotate`` and their projective-transform
helpers, on TF 2.x's ``ImageProjectiveTransformV2`` op."""
import tensorflow as tf


def _as_batch(images):
    """``images`` (HW, HWC or NHWC) as NHWC, and a function giving a result its original rank."""
    images = tf.convert_to_tensor(images)
    rank = images.shape.ndims
    if rank == 2:
        return images[None, :, :, None], lambda out: out[0, :, :, 0]
    if rank == 3:
        return images[None], lambda out: out[0]
    if rank == 4:
        return images, lambda out: out
    raise ValueError("tf.contrib.image: images must be of rank 2, 3 or 4; got shape %s"
                     % images.shape)


def transform(images, transforms, interpolation="NEAREST", output_shape=None, name=None):
    """``tf.contrib.image.transform``: projective transforms ``[a0, a1, a2, b0, b1, b2, c0, c1]``
    (one, or one per image) mapping output points to input points; outside points are 0."""
    with tf.name_scope(name or "transform"):
        batch, restore = _as_batch(images)
        transforms = tf.convert_to_tensor(transforms, tf.float32)
        if transforms.shape.ndims == 1:
            transforms = transforms[None]
        if output_shape is None:
            output_shape = tf.shape(batch)[1:3]
        out = tf.raw_ops.ImageProjectiveTransformV2(
            images=batch, transforms=transforms,
            output_shape=tf.convert_to_tensor(output_shape, tf.int32),
            interpolation=interpolation.upper(), fill_mode="CONSTANT")
        return restore(out)


def translations_to_projective_transforms(translations, name=None):
    """``[dx, dy]`` (or one per image) as the transforms moving an image right by dx, down by
    dy."""
    with tf.name_scope(name or "translations_to_projective_transforms"):
        translations = tf.convert_to_tensor(translations, tf.float32)
        if translations.shape.ndims == 1:
            translations = translations[None]
        n = tf.shape(translations)[0]
        ones, zeros = tf.ones([n, 1]), tf.zeros([n, 1])
        return tf.concat([ones, zeros, -translations[:, :1], zeros, ones, -translations[:, 1:2],
                          zeros, zeros], axis=1)


def angles_to_projective_transforms(angles, image_height, image_width, name=None):
    """The transforms rotating images counter-clockwise by ``angles`` (radians) about their
    centres."""
    with tf.name_scope(name or "angles_to_projective_transforms"):
        angles = tf.convert_to_tensor(angles, tf.float32)
        if angles.shape.ndims == 0:
            angles = angles[None]
        h = tf.cast(image_height, tf.float32) - 1.0
        w = tf.cast(image_width, tf.float32) - 1.0
        cos, sin = tf.cos(angles), tf.sin(angles)
        x_offset = (w - (cos * w - sin * h)) / 2.0
        y_offset = (h - (sin * w + cos * h)) / 2.0
        zeros = tf.zeros_like(angles)
        return tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zeros, zeros], axis=1)


def translate(images, translations, interpolation="NEAREST", name=None):
    """``tf.contrib.image.translate``: shift by ``[dx, dy]`` pixels, filling with 0."""
    with tf.name_scope(name or "translate"):
        return transform(images, translations_to_projective_transforms(translations),
                         interpolation=interpolation)


def rotate(images, angles, interpolation="NEAREST", name=None):
    """``tf.contrib.image.rotate``: rotate counter-clockwise by ``angles`` radians (one, or one
    per image) about the centre, filling with 0."""
    with tf.name_scope(name or "rotate"):
        batch, restore = _as_batch(images)
        shape = tf.shape(batch)
        return restore(transform(batch, angles_to_projective_transforms(angles, shape[1],
                                                                        shape[2]),
                                 interpolation=interpolation))


__all__ = ["transform", "translations_to_projective_transforms", "angles_to_projective_transforms", "translate", "rotate"]
