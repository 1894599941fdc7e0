/**
 * The running server: one language client at a time, started, restarted and stopped in order, and the settings
 * it is told about. Restarts only when how it is launched changed; other settings are re-read by the server.
 * Before a start it asks the interpreter whether it can run the server, and where not, says why and offers the fixes.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import {
    ApplyWorkspaceEditRequest,
    DidChangeConfigurationNotification,
    LanguageClient,
    LanguageClientOptions,
    ResponseError,
    RevealOutputChannelOn,
    ServerOptions,
    ShowMessageNotification,
    State,
} from "vscode-languageclient/node";
import { extractedBundle, shippedWheel } from "./bundle";
import { offerRetry } from "./commands";
import { EditConfirmation } from "./confirm";
import { INSTALL, installInto } from "./install";
import {
    ExtensionHome,
    LaunchOptions,
    ProcessPlace,
    describeLaunch,
    launchScope,
    processFolder,
    resolveLaunch,
    sameLaunch,
    withPythonPath,
} from "./launch";
import { ServerMessages } from "./notifications";
import { ServerOutput } from "./output";
import { Probe, probeServer } from "./probe";
import { PythonEnvironments } from "./python";
import { SECTION, injectTrust, serverSettings } from "./settings";
import { STATUS_NOTIFICATION, ServerStatus, StatusParams } from "./status";

export const CLIENT_ID = "dice"; // also the prefix of `dice.trace.server`, which the client reads itself
export const CLIENT_NAME = "DICE";

/** The buttons offered when the server cannot start, after "Install into this interpreter" where pip can run. */
export const FIXES = ["Select interpreter", "Open settings", "Show logs"] as const;

export const DOCUMENT_SELECTOR = [
    { scheme: "file", language: "python" },
    { scheme: "untitled", language: "python" },
];

export function clientOptions(log: vscode.LogOutputChannel, messages: ServerMessages): LanguageClientOptions {
    return {
        documentSelector: DOCUMENT_SELECTOR,
        // The server's stderr, one log record per line it writes (the client hands over chunks as they come)
        outputChannel: new ServerOutput(log),
        traceOutputChannel: log,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        middleware: {
            executeCommand: offerRetry(messages, () => log.show()),
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
 * same, and the command line stays what the settings say (`TransportKind.stdio` would append `--stdio`, which
 * `python -m dice_lsp` accepts too).
 */
export function serverOptions(launch: LaunchOptions, place: ProcessPlace): ServerOptions {
    return {
        command: launch.command,
        args: [...launch.args],
        options: { ...(place.cwd === undefined ? {} : { cwd: place.cwd }), ...(place.env ? { env: place.env } : {}) },
    };
}

/** Why the server cannot start, and what can be done about it. */
interface Unable {
    readonly launch: LaunchOptions;
    readonly place: ProcessPlace;
    readonly message: string;
    readonly probe?: Probe;
}

export class ServerSession implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private launch: LaunchOptions | undefined;
    private queue: Promise<void> = Promise.resolve();
    private readonly edits: EditConfirmation;

    constructor(
        private readonly log: vscode.LogOutputChannel,
        private readonly status: ServerStatus,
        private readonly environments: PythonEnvironments | undefined,
        private readonly home: ExtensionHome,
        readonly messages: ServerMessages = new ServerMessages(log),
    ) {
        this.edits = new EditConfirmation(log);
    }

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
        this.edits.dispose();
    }

    private enqueue(step: () => Promise<void>): Promise<void> {
        const next = this.queue.then(step, step);
        this.queue = next.catch(() => undefined);
        return next;
    }

    private async startClient(launch: LaunchOptions, reason: string): Promise<void> {
        this.log.info(
            `starting the server (${reason}): ${describeLaunch(launch)}  [interpreter: ${launch.source}; ` +
                `dice_lsp: ${launch.strategy}]`,
        );
        this.status.update({ state: "starting" });
        const place = await this.prepare(launch);
        if ("message" in place) {
            this.unable(place);
            return;
        }
        const options = serverOptions(launch, place);
        const client = new LanguageClient(CLIENT_ID, CLIENT_NAME, options, clientOptions(this.log, this.messages));
        client.onNotification(STATUS_NOTIFICATION, (params: StatusParams) => this.status.update(params));
        // Replaces the client's own handler (it pops every message up) once the connection is made.
        client.onNotification(ShowMessageNotification.type, (params) => this.messages.fromServer(params));
        // Replaces the client's own handler too: an edit the server wants confirmed is shown and asked here
        client.onRequest(ApplyWorkspaceEditRequest.type, (params) => this.edits.apply(client, params));
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

    /**
     * Where the server runs, with the shipped dice-lsp first on PYTHONPATH for useBundled; or why it cannot run: the
     * interpreter is missing, imports no dice_lsp, or (useBundled) lacks what dice-lsp requires.
     */
    private async prepare(launch: LaunchOptions): Promise<ProcessPlace | Unable> {
        const cwd = processFolder(launchScope(), this.home);
        fs.mkdirSync(this.home.storage, { recursive: true });
        let place: ProcessPlace = { cwd };
        let bundle: string | undefined;
        if (launch.strategy === "useBundled") {
            try {
                bundle = await extractedBundle(this.home, launch.command, place);
                place = { cwd, env: withPythonPath(process.env, bundle) };
            } catch (error) {
                return { launch, place, message: cannotRun(launch, errorMessage(error)) };
            }
        }
        const probe = await probeServer(launch.command, this.home.root, place, launch.strategy === "useBundled");
        if (probe.problem === undefined) {
            if (probe.origin !== undefined) {
                this.log.info(`dice_lsp from ${probe.origin}`);
            }
            if (bundle !== undefined && probe.origin !== path.join(bundle, "dice_lsp")) {
                this.log.warn("the workspace folder's own dice_lsp is imported before the shipped one");
            }
            return place;
        }
        return { launch, place, message: cannotRun(launch, probe.problem), probe };
    }

    /** The server cannot start: say why once, with the ways out as buttons. */
    private unable(unable: Unable): void {
        this.log.error(unable.message);
        this.status.update({ state: "error", message: unable.message });
        void this.offerFixes(unable);
    }

    private async offerFixes(unable: Unable): Promise<void> {
        const wheel = shippedWheel(this.home);
        const installable = wheel !== undefined && unable.probe?.runs === true;
        const choice = await vscode.window.showErrorMessage(
            `DICE: ${unable.message}`,
            ...(installable ? [INSTALL] : []),
            ...FIXES,
        );
        if (choice === INSTALL && wheel !== undefined) {
            const { launch, place, probe } = unable;
            // pip runs without the bundle on PYTHONPATH: the interpreter's own packages decide what it installs.
            const plain = { cwd: place.cwd };
            if (await installInto(launch.command, wheel, plain, this.log, probe?.externallyManaged === true)) {
                await this.refresh("dice-lsp installed", true);
            }
        } else if (choice === "Select interpreter") {
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

/** Which interpreter cannot run which server, why, and the ways out. */
function cannotRun(launch: LaunchOptions, why: string): string {
    const bundled = launch.strategy === "useBundled";
    const ways = bundled
        ? "Install dice-lsp and what it needs into this interpreter"
        : "Install dice-lsp into this interpreter, or run the server shipped with the extension " +
          "(dice.importStrategy: useBundled) where the interpreter has torch and the rest";
    return (
        `\`${launch.command}\` cannot run the ${bundled ? "bundled " : ""}DICE server: ${why}. ${ways}; ` +
        "or choose another interpreter with dice.interpreter or the Python extension's selection."
    );
}

export function errorMessage(error: unknown): string {
    return error instanceof Error ? error.message : String(error);
}
