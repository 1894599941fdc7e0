/**
 * The running server: one language client at a time, started, restarted and stopped in order, and the settings
 * it is told about. Restarts only when how it is launched changed; other settings are re-read by the server.
 */

import * as vscode from "vscode";
import {
    DidChangeConfigurationNotification,
    LanguageClient,
    LanguageClientOptions,
    ResponseError,
    RevealOutputChannelOn,
    ServerOptions,
    State,
} from "vscode-languageclient/node";
import { LaunchOptions, describeLaunch, launchScope, resolveLaunch, sameLaunch, serverMissing } from "./launch";
import { PythonEnvironments } from "./python";
import { SECTION, injectTrust, serverSettings } from "./settings";
import { STATUS_NOTIFICATION, ServerStatus, StatusParams } from "./status";

export const CLIENT_ID = "dice"; // also the prefix of `dice.trace.server`, which the client reads itself
export const CLIENT_NAME = "DICE";

/** The buttons offered when the server cannot start. */
export const FIXES = ["Select interpreter", "Open settings", "Show logs"] as const;

export const DOCUMENT_SELECTOR = [
    { scheme: "file", language: "python" },
    { scheme: "untitled", language: "python" },
];

export function clientOptions(log: vscode.LogOutputChannel): LanguageClientOptions {
    return {
        documentSelector: DOCUMENT_SELECTOR,
        outputChannel: log,
        traceOutputChannel: log,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        middleware: {
            workspace: {
                configuration: async (params, token, next) => {
                    const answers = await next(params, token);
                    return answers instanceof ResponseError ? answers : injectTrust(params.items, answers);
                },
                // The session tells the server about changes itself: on `dice` changes and when trust is granted,
                // which is no settings change. The client's own push (`settings: null` on a change to any
                // extension's settings, once the server registers for it) would only make the server re-read twice.
                didChangeConfiguration: () => Promise.resolve(),
            },
        },
    };
}

/**
 * The server process over stdio. No `transport` is given: the client then talks over the process's stdio all the
 * same, and the command line stays what `dice.serverArgs` says (`TransportKind.stdio` would append `--stdio`, which
 * `python -m dice_lsp` accepts too).
 */
export function serverOptions(launch: LaunchOptions, scope: vscode.Uri | undefined): ServerOptions {
    return {
        command: launch.command,
        args: [...launch.args],
        options: scope?.scheme === "file" ? { cwd: scope.fsPath } : {},
    };
}

export class ServerSession implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private launch: LaunchOptions | undefined;
    private queue: Promise<void> = Promise.resolve();

    constructor(
        private readonly log: vscode.LogOutputChannel,
        private readonly status: ServerStatus,
        private readonly environments: PythonEnvironments | undefined,
    ) {}

    get running(): boolean {
        return this.client?.state === State.Running;
    }

    /** Starts the server, or restarts it when its launch changed (or `force`); otherwise re-sends the settings. */
    refresh(reason: string, force = false): Promise<void> {
        return this.enqueue(async () => {
            const launch = await resolveLaunch(launchScope(), this.environments);
            if (!force && this.running && sameLaunch(launch, this.launch)) {
                await this.sendSettings();
                return;
            }
            await this.stopClient();
            await this.startClient(launch, reason);
        });
    }

    /** Tells the running server that `dice` settings changed; it re-reads them with `workspace/configuration`. */
    settingsChanged(): Promise<void> {
        return this.enqueue(() => this.sendSettings());
    }

    stop(): Promise<void> {
        return this.enqueue(() => this.stopClient());
    }

    dispose(): void {
        void this.stop();
    }

    private enqueue(step: () => Promise<void>): Promise<void> {
        const next = this.queue.then(step, step);
        this.queue = next.catch(() => undefined);
        return next;
    }

    private async startClient(launch: LaunchOptions, reason: string): Promise<void> {
        const scope = launchScope();
        this.log.info(`starting the server (${reason}): ${describeLaunch(launch)}  [interpreter: ${launch.source}]`);
        this.status.update({ state: "starting" });
        const missing = await serverMissing(launch, scope?.scheme === "file" ? scope.fsPath : undefined);
        if (missing !== undefined) {
            const message =
                `\`${launch.command}\` cannot run the DICE server: ${missing}. Install dice-lsp for this interpreter ` +
                "(`pip install -e .` in a dice-lsp checkout), or choose another one with dice.interpreter or the " +
                "Python extension's interpreter selection.";
            this.log.error(message);
            this.status.update({ state: "error", message });
            void this.offerFixes(message);
            return;
        }
        const client = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions(launch, scope), clientOptions(this.log));
        client.onNotification(STATUS_NOTIFICATION, (params: StatusParams) => this.status.update(params));
        client.onDidChangeState(({ newState }) => {
            if (newState === State.Stopped && this.client === client) {
                this.status.update({ state: "stopped", message: "the server stopped; see the logs" });
            }
        });
        this.client = client;
        this.launch = launch;
        try {
            await client.start();
        } catch (error) {
            const message =
                `could not start \`${describeLaunch(launch)}\`: ${errorMessage(error)}. ` +
                "Is dice-lsp installed for this interpreter? Set dice.interpreter or select one in the Python extension.";
            this.log.error(message);
            this.status.update({ state: "error", message });
        }
    }

    /** The server cannot start: say why once, with the ways out as buttons. */
    private async offerFixes(message: string): Promise<void> {
        const choice = await vscode.window.showErrorMessage(`DICE: ${message}`, ...FIXES);
        if (choice === "Select interpreter") {
            await vscode.commands.executeCommand("python.setInterpreter");
        } else if (choice === "Open settings") {
            await vscode.commands.executeCommand("workbench.action.openSettings", "dice.interpreter");
        } else if (choice === "Show logs") {
            this.log.show();
        }
    }

    private async stopClient(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        this.launch = undefined;
        if (client === undefined) {
            return;
        }
        try {
            if (client.isRunning()) {
                await client.stop();
            }
            await client.dispose();
        } catch (error) {
            this.log.warn(`stopping the server: ${errorMessage(error)}`);
        }
    }

    private async sendSettings(): Promise<void> {
        if (this.client === undefined || !this.running) {
            return;
        }
        await this.client.sendNotification(DidChangeConfigurationNotification.type, {
            settings: { [SECTION]: serverSettings(launchScope()) },
        });
    }
}

export function errorMessage(error: unknown): string {
    return error instanceof Error ? error.message : String(error);
}
