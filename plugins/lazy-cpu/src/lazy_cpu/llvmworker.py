"""LLVM IR -> object code: `IRCompiler` compiles in the calling process, `CompileWorker` in a worker process (this file
run as a script, which imports nothing but llvmlite).

llvmlite takes one process-wide lock around every call into LLVM, so threads of one process compile one kernel at a
time however many cores there are. `lazy_cpu.device.LLVMJit` therefore sends the kernels a schedule builds in
parallel (`lazy.engine.runners.precompile`) to worker processes, one per compiling thread, and compiles single
kernels here. A worker that aborts on some IR takes only itself down: the kernel's compile fails with its message.

The protocol, over the worker's stdin and stdout, is messages of a 4-byte little-endian length and that many bytes.
The parent sends the target first (triple, CPU name, features: one message each) and the worker answers with an empty
message once it is ready; then each request is a message of a flag byte (1: the cheap pipeline) and the IR, and each
reply a status byte (0: the object code follows, 1: an error message follows) and the payload. The worker exits at
the end of its input."""

from __future__ import annotations

import os
import struct
import sys
from typing import IO, Any

LENGTH = struct.Struct("<I")


# How kernels address what lies outside their code (`CODE_MODEL`, part of the compile cache key): absolute 64-bit
# addresses only. MCJIT places a kernel's code, its constants and the C library's memcpy (loop-idiom turns copy loops
# into calls) wherever memory is free; with the default small model each such reference is a 32-bit PC-relative
# offset, and once gigabytes of buffers lay between them a load aborted the process (RuntimeDyldELF: "Assertion
# `isInt<32>(RealOffset)' failed"). The large model's absolute references cost a `movabs` where a constant is first
# loaded (outside the inner loops).
RELOC, CODE_MODEL = "static", "large"


def target_machine(llvm: Any, triple: str, cpu: str, features: str) -> Any:
    """The host target machine all kernels are compiled for (absolute addressing, aggressive code generation)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc=RELOC, codemodel=CODE_MODEL
    )


class IRCompiler:
    """A context and target machine of one thread's own (LLVM objects are not shared between threads)."""

    def __init__(self, llvm: Any, triple: str, cpu: str, features: str):
        self.llvm, self.triple = llvm, triple
        self.context, self.machine = llvm.create_context(), target_machine(llvm, triple, cpu, features)

    def compile(self, src: str, cheap: bool) -> bytes:
        """IR -> an object file: the O3 pipeline with LLVM's vectorizers, or (`cheap`) O1 without them. Parse and
        verify errors raise RuntimeError (llvmlite's)."""
        llvm = self.llvm
        mod = llvm.parse_assembly(src, context=self.context)
        mod.triple, mod.data_layout = self.triple, str(self.machine.target_data)
        mod.verify()
        tuning = llvm.PipelineTuningOptions(speed_level=1 if cheap else 3)
        tuning.loop_vectorization = tuning.slp_vectorization = tuning.loop_unrolling = not cheap
        builder = llvm.create_pass_builder(self.machine, tuning)
        builder.getModulePassManager().run(mod, builder)
        return bytes(self.machine.emit_object(mod))


def send(stream: IO[bytes], payload: bytes) -> None:
    stream.write(LENGTH.pack(len(payload)) + payload)
    stream.flush()


def receive(stream: IO[bytes]) -> bytes | None:
    """The next message, or None at the end of the stream (also in the middle of one: its writer is gone)."""
    header = stream.read(LENGTH.size)
    if len(header) < LENGTH.size:
        return None
    (size,) = LENGTH.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


class CompileWorker:
    """The parent's side of one worker process. Not thread-safe: one request at a time (the caller hands it out)."""

    def __init__(self, triple: str, cpu: str, features: str):
        import subprocess
        import tempfile

        self.subprocess = subprocess
        self.stderr = tempfile.TemporaryFile()  # read when it dies (a pipe nobody reads could fill and stall it)
        # the same interpreter and environment (PYTHONPATH, user site-packages), so it finds the same llvmlite
        try:
            self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.stderr)  # fmt: skip
        except OSError:
            self.stderr.close()
            raise
        stdin, stdout = self._streams()
        try:
            for part in (triple, cpu, features):
                send(stdin, part.encode())
            ready = receive(stdout)
        except OSError:  # it exited before reading (a broken pipe)
            ready = None
        if ready is None:
            raise OSError(f"the LLVM compile worker did not start: {self.close()}")

    def _streams(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def compile(self, src: str, cheap: bool) -> bytes:
        """The object code of `src`; RuntimeError with LLVM's message when it does not compile, or with the
        worker's exit status and last words when it died meanwhile (this worker is then closed)."""
        stdin, stdout = self._streams()
        try:
            send(stdin, bytes([int(cheap)]) + src.encode())
            reply = receive(stdout)
        except OSError:
            reply = None
        if not reply:
            raise RuntimeError(f"the LLVM compile worker exited while compiling: {self.close()}")
        if reply[0] != 0:
            raise RuntimeError(reply[1:].decode(errors="replace"))
        return reply[1:]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> str:
        """Stop the worker (end of its input, then kill if it lingers); returns its exit status and stderr's end."""
        proc = self.proc
        try:
            proc.communicate(timeout=5)  # closes its input first
        except (OSError, ValueError, self.subprocess.TimeoutExpired):
            proc.kill()
            proc.communicate()
        err = b""
        if not self.stderr.closed:
            self.stderr.seek(0)
            err = self.stderr.read()
            self.stderr.close()
        err_text = err.decode(errors="replace").strip()[-2000:]
        return f"status {proc.returncode}" + (f": {err_text}" if err_text else "")


def main() -> None:
    """The worker: compile requests from stdin until it ends."""
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run as a script: this package's modules must not stand in for others of the same name
    import llvmlite.binding as llvm

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    target = [receive(stdin) for _ in range(3)]
    if any(part is None for part in target):
        return
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple, cpu, features = (part.decode() for part in target if part is not None)
    compiler = IRCompiler(llvm, triple, cpu, features)
    send(stdout, b"")
    while (request := receive(stdin)) is not None:
        try:
            reply = b"\0" + compiler.compile(request[1:].decode(), cheap=request[0] == 1)
        except RuntimeError as e:  # parse and verify errors
            reply = b"\1" + str(e).encode()
        send(stdout, reply)


if __name__ == "__main__":
    main()
