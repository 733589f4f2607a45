// What the fleet view and the timeline share: a canvas the size of its scrolling box, in device pixels, so that
// lines and text stay sharp on high-density screens.

// Resizes `canvas` to `scroll`'s visible box (only when it changed: a resize clears the canvas) and returns a
// cleared 2D context drawing in CSS pixels, with that box's width and height.
export function sizedContext(canvas, scroll) {
  const ratio = window.devicePixelRatio || 1;
  const width = scroll.clientWidth;
  const height = scroll.clientHeight;
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return { ctx, width, height };
}
