/**
 * "Install into this interpreter": `<python> -m pip install <the shipped wheel>`, with its output in a progress
 * notification and the DICE log, and a refusal to install into an externally managed Python (PEP 668) unless the
 * user says so.
 */

import { spawn } from "node:child_process";
import * as vscode from "vscode";
import { ProcessPlace } from "./launch";

export const INSTALL = "Install into this interpreter";
const ANYWAY = "Install anyway";
const SELECT = "Select interpreter";
/** pip's lines kept to say why an install failed: the last few name the cause ("No matching distribution ..."). */
const TAIL_LINES = 3;

export interface Installed {
    readonly ok: boolean;
    readonly cancelled: boolean;
    /** pip refused because the interpreter is externally managed (PEP 668). */
    readonly externallyManaged: boolean;
    /** pip's last lines. */
    readonly tail: string;
}

interface PipOptions {
    readonly breakSystemPackages: boolean;
    readonly onLine?: (line: string) => void;
    readonly token?: vscode.CancellationToken;
}

/** Runs pip to install `wheel` (and what it requires) into `python`; every line of its output goes to `log`. */
export function pipInstall(
    python: string,
    wheel: string,
    place: ProcessPlace,
    log: vscode.LogOutputChannel,
    options: PipOptions,
): Promise<Installed> {
    const args = ["-m", "pip", "install", "--disable-pip-version-check"];
    if (options.breakSystemPackages) {
        args.push("--break-system-packages");
    }
    args.push(wheel);
    log.info(`installing: ${python} ${args.join(" ")}`);
    const lines: string[] = [];
    return new Promise((resolve) => {
        let cancelled = false;
        const child = spawn(python, args, { cwd: place.cwd, env: place.env, stdio: ["ignore", "pipe", "pipe"] });
        const cancel = options.token?.onCancellationRequested(() => {
            cancelled = true;
            child.kill("SIGTERM");
        });
        const read = (chunk: Buffer): void => {
            // pip redraws its progress bars with \r: each redraw is a line of its own here.
            for (const line of chunk.toString("utf8").split(/[\r\n]+/)) {
                if (line.trim() !== "") {
                    lines.push(line);
                    log.info(`pip: ${line}`);
                    options.onLine?.(line.trim());
                }
            }
        };
        child.stdout.on("data", read);
        child.stderr.on("data", read);
        const finish = (code: number | null, failure?: string): void => {
            cancel?.dispose();
            const text = lines.join("\n");
            const tail = failure ?? lines.slice(-TAIL_LINES).map((line) => line.trim()).join(" ");
            resolve({
                ok: code === 0 && !cancelled,
                cancelled,
                externallyManaged: text.includes("externally-managed-environment"),
                tail,
            });
        };
        child.on("error", (error) => finish(null, error.message));
        child.on("close", (code) => finish(code));
    });
}

/**
 * Installs the shipped `wheel` into `python` once the user agrees where needed, and says what went wrong; true when
 * dice-lsp was installed. `externallyManaged` is what the probe found; pip's own PEP 668 refusal is asked about too.
 */
export async function installInto(
    python: string,
    wheel: string,
    place: ProcessPlace,
    log: vscode.LogOutputChannel,
    externallyManaged: boolean,
): Promise<boolean> {
    let breakSystemPackages = false;
    if (externallyManaged) {
        if (!(await askToBreakSystemPackages(python))) {
            return false;
        }
        breakSystemPackages = true;
    }
    let result = await installWithProgress(python, wheel, place, log, breakSystemPackages);
    if (!result.ok && !result.cancelled && result.externallyManaged && !breakSystemPackages) {
        if (!(await askToBreakSystemPackages(python))) {
            return false;
        }
        result = await installWithProgress(python, wheel, place, log, true);
    }
    if (result.ok) {
        log.info(`installed dice-lsp into ${python}`);
    } else if (result.cancelled) {
        log.info(`installing dice-lsp into ${python} was cancelled`);
    } else {
        const message = `DICE: installing dice-lsp into \`${python}\` failed: ${result.tail}`;
        log.error(message);
        if ((await vscode.window.showErrorMessage(message, "Show logs")) === "Show logs") {
            log.show();
        }
    }
    return result.ok;
}

function installWithProgress(
    python: string,
    wheel: string,
    place: ProcessPlace,
    log: vscode.LogOutputChannel,
    breakSystemPackages: boolean,
): Promise<Installed> {
    const options = {
        location: vscode.ProgressLocation.Notification,
        title: `DICE: installing dice-lsp into ${python}`,
        cancellable: true,
    };
    return Promise.resolve(
        vscode.window.withProgress(options, (progress, token) =>
            pipInstall(python, wheel, place, log, {
                breakSystemPackages,
                onLine: (line) => progress.report({ message: line }),
                token,
            }),
        ),
    );
}

/** PEP 668: pip will not install into a system's Python; true only when the user chooses to install anyway. */
async function askToBreakSystemPackages(python: string): Promise<boolean> {
    const choice = await vscode.window.showWarningMessage(
        `DICE: \`${python}\` is an externally managed Python (PEP 668): pip installs into it only with ` +
            "--break-system-packages, which can break packages the system itself uses. Make a virtual environment " +
            "instead (`python3 -m venv .venv`), select it and install there.",
        SELECT,
        ANYWAY,
    );
    if (choice === SELECT) {
        await vscode.commands.executeCommand("python.setInterpreter");
    }
    return choice === ANYWAY;
}
