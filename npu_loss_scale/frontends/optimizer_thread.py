"""A background thread for optimizer updates, with a :class:`GradScaler` that keeps up with it.

RoundPipe runs the optimizer update on a background thread while the main thread computes the
next step; its GradScaler keeps the scale consistent between the two. :class:`OptimizerThread`
brings that to eager TensorFlow:

* ``thread.submit(fn)`` queues ``fn`` (typically ``lambda: scaler.step(opt, grads_and_vars)``)
  and returns at once with a ``concurrent.futures.Future``; jobs run in order on one thread.
* The step's gradients are unscaled with the scale that scaled *that step's* loss, even if the
  main thread has moved on. The float-status register is read (and cleared) once per iteration
  on the main thread, before the next step's forward pass can record into it: by the first
  ``scaler.unscale_`` called there (to clip before submitting, say), otherwise by ``submit``;
  the remaining unscale, the inf/NaN check and the update run on the optimizer thread.
  ``scaler.step`` belongs in a submitted job: called on the main thread it raises RuntimeError.
* ``scaler.update()`` (main thread only) queues the scale update behind the step; the main
  thread's next ``scale()`` uses the newest scale the optimizer thread has published, which may be
  the one from before the previous ``update()``. An overflow in a step whose loss was scaled with
  a scale that has already been backed off from skips that step but does not back off again.
* ``scaler.get_scale()`` answers for the calling thread; getters with ``up_to_date=True``,
  ``state_dict()`` and ``thread.synchronize()`` wait for the queue to drain. An error raised by a
  job is raised again on the main thread by the next ``submit``/``update``/``synchronize``.

The next step's forward pass may read variables while the previous update is being applied:
the one-step staleness of any asynchronous optimizer; call ``synchronize()`` where it matters
(evaluation, checkpoints).

Example::

    scaler = nls.GradScaler()
    with nls.OptimizerThread(scaler) as thread:
        for x, y in batches:
            with tf.GradientTape() as tape:
                loss = scaler.scale(loss_fn(model(x), y))
            grads = tape.gradient(loss, model.trainable_variables)
            thread.submit(lambda g=grads: scaler.step(opt, list(zip(g, model.trainable_variables))))
            scaler.update()
"""
import concurrent.futures
import queue
import threading

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale.frontends.grad_scaler import GradScaler, NoInfChecksError
from npu_loss_scale.frontends.scaler_iteration import Iteration

_STOP = object()


class OptimizerThread:
    """One background thread running optimizer jobs in order for a :class:`GradScaler`.

    Args:
      scaler: the GradScaler whose steps run here (it may be disabled; then jobs just run).
      max_pending: how many submitted jobs may wait or run at once; ``submit`` blocks while that
        many are unfinished (each holds a step's gradients). None = no bound.
      name: the thread's name.
    """

    def __init__(self, scaler, max_pending=2, name="npu-loss-scale-optimizer"):
        if not isinstance(scaler, GradScaler):
            raise TypeError("scaler must be an npu_loss_scale.GradScaler; got %r (type %s)"
                            % (scaler, type(scaler).__name__))
        if max_pending is not None:
            max_pending = _checks.positive_int("max_pending", max_pending)
        self._slots = threading.Semaphore(max_pending) if max_pending else None
        self._scaler = scaler
        self._queue = queue.Queue()
        self._error = None
        self._error_lock = threading.Lock()
        self._closed = False
        scaler._attach_thread(self)  # pylint: disable=protected-access
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the worker -------------------------------------------------------------------------------
    def _run(self):
        py = self._scaler._py  # pylint: disable=protected-access
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                future, iteration, fn, slot = item
                try:
                    if not future.set_running_or_notify_cancel():
                        continue
                    py.local.iteration = iteration
                    try:
                        future.set_result(fn())
                    except BaseException as err:  # pylint: disable=broad-except
                        with self._error_lock:
                            if self._error is None:
                                self._error = err
                        future.set_exception(err)
                    finally:
                        py.local.iteration = None
                finally:
                    if slot:
                        self._slots.release()
            finally:
                self._queue.task_done()

    def _raise_pending(self):
        with self._error_lock:
            err, self._error = self._error, None
        if err is not None:
            raise RuntimeError("a job on the optimizer thread failed: %r" % (err,)) from err

    def _check_caller(self, what):
        if threading.current_thread() is self._thread:
            raise RuntimeError("%s must be called from the main thread, not from the optimizer "
                               "thread" % what)
        if self._closed:
            raise RuntimeError("%s: this OptimizerThread is closed" % what)

    def _put(self, iteration, fn, slot=False):
        future = concurrent.futures.Future()
        self._queue.put((future, iteration, fn, slot))
        return future

    # -- public -----------------------------------------------------------------------------------
    @property
    def thread(self):
        """The ``threading.Thread`` running the jobs."""
        return self._thread

    def submit(self, fn, *args, **kwargs):
        """Queues ``fn(*args, **kwargs)`` for the optimizer thread; returns a Future of its result.

        Blocks while ``max_pending`` jobs are unfinished. The job belongs to the current
        iteration: inside it, ``scaler.get_scale()``, ``scaler.unscale_`` and ``scaler.step`` use
        the scale this iteration's loss was scaled with. The overflow register is read here, on
        the calling thread.
        """
        self._check_caller("submit()")
        self._raise_pending()
        if not callable(fn):
            raise TypeError("fn must be callable; got %r (type %s)" % (fn, type(fn).__name__))
        scaler = self._scaler
        py = scaler._py  # pylint: disable=protected-access
        if self._slots is not None:
            self._slots.acquire()  # pylint: disable=consider-using-with
        try:
            iteration = py.iteration
            if py.enabled:
                if iteration.scale is None:
                    iteration.scale = py.main_scale
                if iteration.register is None:
                    # Once per iteration: a main-thread unscale_() may have read it already.
                    scaler._read_register(iteration)  # pylint: disable=protected-access
                iteration.stop_recording()   # a main-thread unscale_()'s record goes to the job
                iteration.submitted += 1
            return self._put(iteration, lambda: fn(*args, **kwargs),
                             slot=self._slots is not None)
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise

    def _enqueue_update(self, iteration, new_scale):
        self._check_caller("update()")
        self._raise_pending()
        scaler = self._scaler
        py = scaler._py  # pylint: disable=protected-access
        if new_scale is None and iteration.submitted == 0 and not iteration.found_infs():
            raise NoInfChecksError("No inf checks were recorded prior to update().")
        iteration.stop_recording()
        py.iteration = Iteration()
        return self._put(None, lambda: self._update_job(iteration, new_scale))

    def _update_job(self, iteration, new_scale):
        iteration.stop_recording()     # records of unscale_() calls made inside jobs
        scaler = self._scaler
        py = scaler._py  # pylint: disable=protected-access
        if new_scale is not None:
            scaler._scale.assign(float(new_scale))  # pylint: disable=protected-access
        else:
            found_infs = [float(f) for f in iteration.found_infs()]
            if not found_infs:
                raise NoInfChecksError("No inf checks were recorded prior to update() (no job "
                                       "of this iteration called unscale_() or step()).")
            found = sum(found_infs)
            current = float(scaler._scale.numpy())  # pylint: disable=protected-access
            if found > 0 and iteration.scale is not None and iteration.scale > current:
                # The step overflowed at a scale already backed off from: skipped, not counted
                # twice.
                scaler._growth_tracker.assign(0)  # pylint: disable=protected-access
            else:
                scaler._apply_rules(found)  # pylint: disable=protected-access
        with py.lock:
            py.main_scale = float(scaler._scale.numpy())  # pylint: disable=protected-access

    def _enqueue_call(self, fn):
        return self._put(None, fn)

    def synchronize(self):
        """Waits until every queued job has run; raises the first job error, if any."""
        self._check_caller("synchronize()")
        self._queue.join()
        self._raise_pending()

    def close(self):
        """Runs what is queued, stops the thread and detaches it from the scaler."""
        if self._closed:
            return
        try:
            self.synchronize()
        finally:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()
            self._scaler._detach_thread(self)  # pylint: disable=protected-access

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = [
    "OptimizerThread",
]
